//! The GPU engine: every shader variant and resident operation against the CPU, long rows, the CSR operand, counters, the cost model, tensor-core arithmetic emulated on the host, fits interrupted by device memory.

mod adapters;
mod cost;
mod counters;
mod faults;
mod long_rows;
mod methods;
mod sparse;
mod tensor_core_split;
mod variants;
mod vs_cpu;
mod weighted_gram;
