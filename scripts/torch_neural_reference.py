#!/usr/bin/env python3
"""PyTorch reference for repro/examples/eksvd_neural_bench.rs: seconds per epoch of
the same network, loss and batches, eager, f32 (TF32 off on CUDA).

Same shapes as the example: N synthetic rows of 5 sources (64, 144, 73, 128,
225), 31 classes, MLP d_q-512-256 (ReLU after every layer), W_q 256 x 64,
classifier on [E_1..E_5], loss sum_k (J_k/N)^2 + CE (Eq. 3 per component, as
src/eksvd/neural/loss.rs), AdamW, minibatches gathered from resident data,
the full-data loss after each epoch (untimed, as in the example). Each batch
size runs twice: with one MLP per source, and with the sources stacked and
zero-padded (torch.baddbmm), as gramian runs them.

Usage: torch_neural_reference.py [--device cuda|cpu] [--samples N]
       [--batches 1024,4096] [--epochs E] [--threads T]
(scripts/gpu-check.sh runs it on the lent GPU at N = 30,000; on the CPU,
compare with `eksvd_neural_bench --backend cpu --samples N`.)
"""
import argparse
import time

import torch

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--device", default="cuda")
parser.add_argument("--samples", type=int, default=30000)
parser.add_argument("--batches", default="1024,4096")
parser.add_argument("--epochs", type=int, default=6, help="epochs per run; the first is the warm-up, reported apart")
parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
args = parser.parse_args()
if args.threads > 0:
    torch.set_num_threads(args.threads)
torch.backends.cuda.matmul.allow_tf32 = False
dev, N = args.device, args.samples
dims, C, k, hid, dphi = [64, 144, 73, 128, 225], 31, 64, 512, 256
cuda = dev.startswith("cuda")


def sync():
    if cuda:
        torch.cuda.synchronize()


g = torch.Generator().manual_seed(7)
labels = torch.arange(N) % C
xs = [(0.5 * torch.randn(C, d, generator=g))[labels] + torch.randn(N, d, generator=g) for d in dims]
xs, y = [x.to(dev) for x in xs], labels.to(dev)
Q = len(dims)


class Net(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.maps = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(d, hid), torch.nn.ReLU(), torch.nn.Linear(hid, dphi), torch.nn.ReLU()) for d in dims])
        s.w = torch.nn.ParameterList([torch.nn.Parameter((torch.rand(dphi, k) * 2 - 1) * (3 / dphi) ** 0.5) for _ in dims])
        s.log_gamma = torch.nn.Parameter(torch.zeros(1))
        s.cls = torch.nn.Linear(Q * k, C)

    def forward(s, batch, yb):
        e = [m(x) @ w for m, x, w in zip(s.maps, batch, s.w)]
        norms = sum((w * w).sum(0) for w in s.w)
        tot = sum(s.w)
        var = sum((t * t).sum(0) for t in e)
        j = norms * (Q - 1) / (2 * N) - (tot * tot).sum(0) * 0.5 / N + var * s.log_gamma.exp() * (Q - 1) / (2 * batch[0].shape[0])
        return (j * j).sum() + torch.nn.functional.cross_entropy(s.cls(torch.cat(e, 1)), yb)


W = max(dims)
xs_stacked = torch.zeros(Q, N, W, device=dev)
for q, x in enumerate(xs):
    xs_stacked[q, :, :x.shape[1]] = x


class Stacked(torch.nn.Module):
    def __init__(s):
        super().__init__()
        # torch.nn.Linear's initialisation, U(+-1/sqrt(fan_in)), per source.
        s.a1 = torch.nn.Parameter(torch.zeros(Q, W, hid))
        s.b1 = torch.nn.Parameter(torch.zeros(Q, 1, hid))
        with torch.no_grad():
            for q, d in enumerate(dims):
                s.a1[q, :d].uniform_(-d ** -0.5, d ** -0.5)
                s.b1[q].uniform_(-d ** -0.5, d ** -0.5)
        s.a2 = torch.nn.Parameter((torch.rand(Q, hid, dphi) * 2 - 1) * hid ** -0.5)
        s.b2 = torch.nn.Parameter((torch.rand(Q, 1, dphi) * 2 - 1) * hid ** -0.5)
        s.w = torch.nn.Parameter((torch.rand(Q, dphi, k) * 2 - 1) * (3 / dphi) ** 0.5)
        s.log_gamma = torch.nn.Parameter(torch.zeros(1))
        s.cls = torch.nn.Linear(Q * k, C)

    def forward(s, xb, yb):
        h = torch.relu(torch.baddbmm(s.b1, xb, s.a1))
        e = torch.relu(torch.baddbmm(s.b2, h, s.a2)) @ s.w
        norms = (s.w * s.w).sum((0, 1))
        tot = s.w.sum(0)
        var = (e * e).sum((0, 1))
        j = norms * (Q - 1) / (2 * N) - (tot * tot).sum(0) * 0.5 / N + var * s.log_gamma.exp() * (Q - 1) / (2 * xb.shape[1])
        logits = (e @ s.cls.weight.t().reshape(Q, k, C)).sum(0) + s.cls.bias
        return (j * j).sum() + torch.nn.functional.cross_entropy(logits, yb)


name = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
for layout, make, batch_of in (("per source", Net, lambda idx: [x[idx] for x in xs]), ("stacked", Stacked, lambda idx: xs_stacked[:, idx])):
    for B in (int(b) for b in args.batches.split(",")):
        torch.manual_seed(0)
        net = make().to(dev)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        times = []
        for epoch in range(max(args.epochs, 2)):
            sync()
            t = time.perf_counter()
            perm = torch.randperm(N, device=dev)
            for s in range(0, N, B):
                idx = perm[s:s + B]
                loss = net(batch_of(idx), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            sync()
            times.append(time.perf_counter() - t)
            with torch.no_grad():
                full = net(batch_of(torch.arange(N, device=dev)), y).item()
        print(f"torch {torch.__version__} on {name}: eager, {layout}, batches of {B}, {len(range(0, N, B))} steps per epoch")
        print(f"torch seconds per epoch (2..{len(times)}): {sum(times[1:]) / len(times[1:]):.4f}   epoch 1: {times[0]:.3f}   final full-data loss {full:.4f}")
