/**
 * GELU-gated units (gemma3's FFN), gate = gelu(gate) · up, with the tanh form of GELU that Gemma uses, each step
 * rounded to f32. One function for both backends, so they agree to the bit; it is elementwise and cheap next to the
 * matmuls around it. llama.cpp's CPU path looks GELU up in an f16 table instead (an input rounded to f16 and an f16
 * result: about 1e-3 relative), which the llama.cpp comparison's gemma3 tolerance allows for.
 */
const SQRT_2_OVER_PI = Math.fround(Math.sqrt(2 / Math.PI));
const GELU_COEF_A = Math.fround(0.044715);

export function gegluInPlace(gate: Float32Array, up: Float32Array, n: number): void {
  const f = Math.fround;
  for (let i = 0; i < n; i++) {
    const x = gate[i]!;
    const inner = f(f(SQRT_2_OVER_PI * x) * f(1 + f(f(GELU_COEF_A * x) * x)));
    gate[i] = f(f(f(0.5 * x) * f(1 + f(Math.tanh(inner)))) * up[i]!);
  }
}
