// Precision prelude for the generic shaders: T = f32 (every adapter).

alias T = f32;

fn texp(x: f32) -> f32 {
    return exp(x);
}

fn ttanh(y: f32) -> f32 {
    return tanh(y);
}

fn tsqrt(x: f32) -> f32 {
    return sqrt(x);
}

fn tcos(x: f32) -> f32 {
    return cos(x);
}

fn tlog(x: f32) -> f32 {
    return log(x);
}
