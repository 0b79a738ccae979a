/**
 * A tiny WebAssembly SIMD kernel for decode-time attention, plus the linear memory that holds the
 * decoder's KV cache.
 *
 * Why not TF.js ops: a decode step attends each sequence's one new query to its own cache, whose
 * length differs per sequence. On the wasm backend the only batched form is a 3-D matMul (~1
 * GFLOP/s, no faster than plain JS) and a 2-D matMul over all sequences at once would compute
 * every query against every sequence's keys (n× the work). Plain JS loops ran at ~1 GFLOP/s and
 * took ~52% of a 64-wide step (profile in notes/issue-24a). Two f32x4 loops are all attention
 * needs; they are assembled here from bytes (no compiler in the build, nothing to download), with
 * an exp for the softmax and for SwiGLU's silu (Math.exp in a JS loop took ~20% of a 64-wide step),
 * and a plain-JS implementation of the same functions is kept for head sizes that are not a
 * multiple of 4 and as the test reference.
 */

/** Row kernels over float32 data in one linear memory; pointers and sizes are in bytes. */
export interface RowKernels {
  /** (The SIMD versions need hdBytes to be a multiple of 16.) out[j] = Σ_e q[e] · k[j·stride + e] for j < rows (e over hdBytes/4 floats). */
  dotRows(q: number, k: number, out: number, rows: number, hdBytes: number, strideBytes: number): void;
  /** out[e] = Σ_j p[j] · v[j·stride + e] for e < hdBytes/4 (j < rows). */
  axpyRows(p: number, v: number, out: number, rows: number, hdBytes: number, strideBytes: number): void;
  /**
   * x[i] = exp(x[i] − shift) in place for the floats in [p, p + bytes) (bytes a multiple of 16;
   * the caller pads with −∞), returning their sum. Inputs at or below shift − 87 give ~1e−38.
   */
  expSum(p: number, bytes: number, shift: number): number;
  /** out[i] = silu(g[i]) · u[i] = g[i] · u[i] / (1 + exp(−g[i])) for the floats in bytes (a multiple of 16 for SIMD). */
  siluMul(g: number, u: number, out: number, bytes: number): void;
}

// --- a minimal WebAssembly binary writer (only what the four functions use) ---

const I32 = 0x7f;
const F32 = 0x7d;
const V128 = 0x7b;
const op = {
  block: [0x02, 0x40],
  loop: [0x03, 0x40],
  end: [0x0b],
  brIf: (depth: number) => [0x0d, depth],
  localGet: (i: number) => [0x20, i],
  localSet: (i: number) => [0x21, i],
  localTee: (i: number) => [0x22, i],
  /** Small non-negative constants only (one-byte signed LEB128). */
  i32Const: (n: number) => {
    if (n < 0 || n > 63) throw new Error(`i32Const ${n}: only 0..63 encoded here`);
    return [0x41, n];
  },
  i32Eqz: [0x45],
  i32LtU: [0x49],
  i32GeU: [0x4f],
  br: (depth: number) => [0x0c, depth],
  i32Add: [0x6a],
  i32Shl: [0x74],
  f32Add: [0x92],
  /** f32.store, 4-byte aligned, at a small byte offset. */
  f32Store: (offset: number) => [0x38, 0x02, offset],
  v128Load: [0xfd, 0x00, 0x02, 0x00],
  v128Store: [0xfd, 0x0b, 0x02, 0x00],
  v128Load32Splat: (offset: number) => [0xfd, 0x09, 0x02, offset],
  v128Zero: [0xfd, 0x0c, ...new Array<number>(16).fill(0)],
  f32x4ExtractLane: (lane: number) => [0xfd, 0x1f, lane],
  f32x4Add: [0xfd, 0xe4, 0x01],
  f32x4Mul: [0xfd, 0xe6, 0x01],
  f32x4Sub: [0xfd, 0xe5, 0x01],
  f32x4Max: [0xfd, 0xe9, 0x01],
  f32x4Min: [0xfd, 0xe8, 0x01],
  f32x4Div: [0xfd, 0xe7, 0x01],
  f32x4Neg: [0xfd, 0xe1, 0x01],
  f32x4Nearest: [0xfd, 0x6a],
  f32x4Splat: [0xfd, 0x13],
  i32x4TruncSatF32x4S: [0xfd, 0xf8, 0x01],
  i32x4Splat: [0xfd, 0x11],
  i32x4Add: [0xfd, 0xae, 0x01],
  i32x4Shl: [0xfd, 0xab, 0x01],
  /** f32.const x splatted to all four lanes. */
  f32x4Const: (x: number) => [0x43, ...new Uint8Array(Float32Array.of(x).buffer), 0xfd, 0x13],
};

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

const vec = (items: number[][]) => [...uleb(items.length), ...items.flat()];
const section = (id: number, body: number[]) => [id, ...uleb(body.length), ...body];
const name = (s: string) => [...uleb(s.length), ...Array.from(s, (c) => c.charCodeAt(0))];

// Both functions take rows in pairs with two independent accumulators (two dependency chains,
// one load of q or one pass of the loop per two rows), then the odd row alone.

/** acc = 0 for each local. */
const zero = (...accs: number[]) => accs.flatMap((a) => [...op.v128Zero, ...op.localSet(a)]);
/** local += step; then loop again while local < limit (a do-while tail). */
const stepWhileBelow = (local: number, step: number[], limit: number) => [
  ...op.localGet(local),
  ...step,
  ...op.i32Add,
  ...op.localTee(local),
  ...op.localGet(limit),
  ...op.i32LtU,
  ...op.brIf(0),
];
/** Pushes ((l0 + l1) + l2) + l3 of a f32x4 local. */
const lanesSum = (acc: number) => [
  ...op.localGet(acc),
  ...op.f32x4ExtractLane(0),
  ...op.localGet(acc),
  ...op.f32x4ExtractLane(1),
  ...op.f32Add,
  ...op.localGet(acc),
  ...op.f32x4ExtractLane(2),
  ...op.f32Add,
  ...op.localGet(acc),
  ...op.f32x4ExtractLane(3),
  ...op.f32Add,
];
/** Branches out of `depth` when j (local 6) + extra >= rows (local 3). */
const exitWhenRowsDone = (extra: number, depth: number) => [
  ...op.localGet(6),
  ...op.i32Const(extra),
  ...op.i32Add,
  ...op.localGet(3),
  ...op.i32GeU,
  ...op.brIf(depth),
];
/** acc += a · b for the v128 at the address on the stack (b) and `a` pushed by `loadA`. */
const fma = (acc: number, loadA: number[], loadB: number[]) => [
  ...op.localGet(acc),
  ...loadA,
  ...loadB,
  ...op.f32x4Mul,
  ...op.f32x4Add,
  ...op.localSet(acc),
];

// dot_rows(q, k, out, rows, hdBytes, stride); locals 6 j, 7 e, 8 kp, 9 acc0, 10 acc1, 11 qv, 12 kp2
const dotRowsBody = [
  ...op.localGet(1),
  ...op.localSet(8),
  ...op.block,
  ...op.block,
  ...op.loop,
  ...exitWhenRowsDone(1, 1),
  ...zero(9, 10),
  ...op.i32Const(0),
  ...op.localSet(7),
  ...op.localGet(8),
  ...op.localGet(5),
  ...op.i32Add,
  ...op.localSet(12),
  ...op.loop,
  ...op.localGet(0),
  ...op.localGet(7),
  ...op.i32Add,
  ...op.v128Load,
  ...op.localSet(11),
  ...fma(9, op.localGet(11), [...op.localGet(8), ...op.localGet(7), ...op.i32Add, ...op.v128Load]),
  ...fma(10, op.localGet(11), [...op.localGet(12), ...op.localGet(7), ...op.i32Add, ...op.v128Load]),
  ...stepWhileBelow(7, op.i32Const(16), 4),
  ...op.end,
  ...op.localGet(2),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Shl,
  ...op.i32Add,
  ...lanesSum(9),
  ...op.f32Store(0),
  ...op.localGet(2),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Shl,
  ...op.i32Add,
  ...lanesSum(10),
  ...op.f32Store(4),
  ...op.localGet(12),
  ...op.localGet(5),
  ...op.i32Add,
  ...op.localSet(8),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Add,
  ...op.localSet(6),
  ...op.br(0),
  ...op.end,
  ...op.end,
  // the odd last row
  ...exitWhenRowsDone(0, 0),
  ...zero(9),
  ...op.i32Const(0),
  ...op.localSet(7),
  ...op.loop,
  ...fma(
    9,
    [...op.localGet(0), ...op.localGet(7), ...op.i32Add, ...op.v128Load],
    [...op.localGet(8), ...op.localGet(7), ...op.i32Add, ...op.v128Load],
  ),
  ...stepWhileBelow(7, op.i32Const(16), 4),
  ...op.end,
  ...op.localGet(2),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Shl,
  ...op.i32Add,
  ...lanesSum(9),
  ...op.f32Store(0),
  ...op.end,
  ...op.end,
];

// axpy_rows(p, v, out, rows, hdBytes, stride); locals 6 j, 7 e, 8 vp, 9 acc0, 10 acc1, 11 (unused), 12 (unused)
const pAt = (offset: number) => [
  ...op.localGet(0),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Shl,
  ...op.i32Add,
  ...op.v128Load32Splat(offset),
];
const axpyRowsBody = [
  ...op.block,
  ...op.localGet(3),
  ...op.i32Eqz,
  ...op.brIf(0),
  ...op.loop,
  ...zero(9, 10),
  ...op.localGet(1),
  ...op.localGet(7),
  ...op.i32Add,
  ...op.localSet(8),
  ...op.i32Const(0),
  ...op.localSet(6),
  ...op.block,
  ...op.loop,
  ...exitWhenRowsDone(1, 1),
  ...fma(9, pAt(0), [...op.localGet(8), ...op.v128Load]),
  ...fma(10, pAt(4), [...op.localGet(8), ...op.localGet(5), ...op.i32Add, ...op.v128Load]),
  ...op.localGet(8),
  ...op.localGet(5),
  ...op.i32Add,
  ...op.localGet(5),
  ...op.i32Add,
  ...op.localSet(8),
  ...op.localGet(6),
  ...op.i32Const(2),
  ...op.i32Add,
  ...op.localSet(6),
  ...op.br(0),
  ...op.end,
  ...op.end,
  // the odd last row
  ...op.block,
  ...exitWhenRowsDone(0, 0),
  ...fma(9, pAt(0), [...op.localGet(8), ...op.v128Load]),
  ...op.end,
  ...op.localGet(2),
  ...op.localGet(7),
  ...op.i32Add,
  ...op.localGet(9),
  ...op.localGet(10),
  ...op.f32x4Add,
  ...op.v128Store,
  ...stepWhileBelow(7, op.i32Const(16), 4),
  ...op.end,
  ...op.end,
  ...op.end,
];

// exp_sum(p, bytes, shift) -> f32; locals 3 i, 4 x, 5 n, 6 acc, 7 shiftv, 8 r
// exp(x) = 2^n · e^r with n = nearest(x·log2 e), r = x − n·ln 2 ∈ [−0.347, 0.347], e^r by its
// degree-6 Taylor polynomial (relative error < 2e−7), 2^n built in the exponent bits.
const horner = [1 / 120, 1 / 24, 1 / 6, 1 / 2, 1, 1].flatMap((c) => [
  ...op.localGet(8),
  ...op.f32x4Mul,
  ...op.f32x4Const(c),
  ...op.f32x4Add,
]);
/**
 * exp of the f32x4 in local `x` (clamped by the caller to ±87), left on the stack: 2^n · p(r) with
 * n = nearest(x · log2 e) in local `n` and r = x − n · ln 2 in local 8 (which `horner` reads).
 */
const expOf = (x: number, n: number) => [
  ...op.localGet(x),
  ...op.f32x4Const(Math.LOG2E),
  ...op.f32x4Mul,
  ...op.f32x4Nearest,
  ...op.localSet(n),
  ...op.localGet(x),
  ...op.localGet(n),
  ...op.f32x4Const(Math.LN2),
  ...op.f32x4Mul,
  ...op.f32x4Sub,
  ...op.localSet(8),
  ...op.f32x4Const(1 / 720),
  ...horner,
  ...op.localGet(n),
  ...op.i32x4TruncSatF32x4S,
  // i32.const 127 (two-byte signed LEB128), splat, add; then << 23
  ...[0x41, 0xff, 0x00],
  ...op.i32x4Splat,
  ...op.i32x4Add,
  ...op.i32Const(23),
  ...op.i32x4Shl,
  ...op.f32x4Mul,
];
const expSumBody = [
  ...op.localGet(2),
  ...op.f32x4Splat,
  ...op.localSet(7),
  ...zero(6),
  ...op.loop,
  ...op.localGet(0),
  ...op.localGet(3),
  ...op.i32Add,
  ...op.v128Load,
  ...op.localGet(7),
  ...op.f32x4Sub,
  ...op.f32x4Const(-87),
  ...op.f32x4Max,
  ...op.localSet(4),
  ...expOf(4, 5),
  ...op.localSet(4),
  ...op.localGet(0),
  ...op.localGet(3),
  ...op.i32Add,
  ...op.localGet(4),
  ...op.v128Store,
  ...op.localGet(6),
  ...op.localGet(4),
  ...op.f32x4Add,
  ...op.localSet(6),
  ...stepWhileBelow(3, op.i32Const(16), 1),
  ...op.end,
  ...lanesSum(6),
  ...op.end,
];

// silu_mul(g, u, out, bytes); locals 4 i, 5 x, 6 n, 7 gv, 8 r. exp(−g) as in exp_sum, its
// argument clamped to ±87 (beyond, silu is 0 or g to float precision).
const siluMulBody = [
  ...op.loop,
  ...op.localGet(0),
  ...op.localGet(4),
  ...op.i32Add,
  ...op.v128Load,
  ...op.localSet(7),
  ...op.localGet(7),
  ...op.f32x4Neg,
  ...op.f32x4Const(87),
  ...op.f32x4Min,
  ...op.f32x4Const(-87),
  ...op.f32x4Max,
  ...op.localSet(5),
  ...expOf(5, 6),
  ...op.f32x4Const(1),
  ...op.f32x4Add,
  ...op.localSet(5),
  // out[i] = g · u / (1 + e)
  ...op.localGet(2),
  ...op.localGet(4),
  ...op.i32Add,
  ...op.localGet(7),
  ...op.localGet(1),
  ...op.localGet(4),
  ...op.i32Add,
  ...op.v128Load,
  ...op.f32x4Mul,
  ...op.localGet(5),
  ...op.f32x4Div,
  ...op.v128Store,
  ...stepWhileBelow(4, op.i32Const(16), 3),
  ...op.end,
  ...op.end,
];

/** The module's bytes: one exported memory and the four functions. */
export function kernelModuleBytes(initialPages: number): Uint8Array {
  const rowLocals = [...uleb(3), 3, I32, 3, V128, 1, I32];
  const expLocals = [...uleb(2), 1, I32, 5, V128];
  const siluLocals = [...uleb(2), 1, I32, 4, V128];
  const body = (code: number[], locals = rowLocals) => {
    const b = [...locals, ...code];
    return [...uleb(b.length), ...b];
  };
  return Uint8Array.from([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(
      1,
      vec([
        [0x60, ...uleb(6), I32, I32, I32, I32, I32, I32, 0x00],
        [0x60, ...uleb(3), I32, I32, F32, 0x01, F32],
        [0x60, ...uleb(4), I32, I32, I32, I32, 0x00],
      ]),
    ),
    ...section(3, vec([[0x00], [0x00], [0x01], [0x02]])),
    ...section(5, vec([[0x00, ...uleb(initialPages)]])),
    ...section(
      7,
      vec([
        [...name("memory"), 0x02, 0x00],
        [...name("dot_rows"), 0x00, 0x00],
        [...name("axpy_rows"), 0x00, 0x01],
        [...name("exp_sum"), 0x00, 0x02],
        [...name("silu_mul"), 0x00, 0x03],
      ]),
    ),
    ...section(10, [
      ...uleb(4),
      ...body(dotRowsBody),
      ...body(axpyRowsBody),
      ...body(expSumBody, expLocals),
      ...body(siluMulBody, siluLocals),
    ]),
  ]);
}

const PAGE_BYTES = 65_536;

/** The slice of the WebAssembly JS API used here (the project's lib setting carries no DOM types). */
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { readonly exports: Record<string, unknown> };
  Memory: new (descriptor: { initial: number }) => WasmMemory;
}
const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

/** The same four functions in plain JS over a memory's float32 view (any head size). */
function jsKernels(floats: () => Float32Array): RowKernels {
  return {
    dotRows(q, k, out, rows, hdBytes, strideBytes) {
      const f = floats();
      const qi = q >> 2;
      const hd = hdBytes >> 2;
      for (let j = 0; j < rows; j++) {
        const ki = (k + j * strideBytes) >> 2;
        let dot = 0;
        for (let e = 0; e < hd; e++) dot += f[qi + e]! * f[ki + e]!;
        f[(out >> 2) + j] = dot;
      }
    },
    axpyRows(p, v, out, rows, hdBytes, strideBytes) {
      const f = floats();
      const hd = hdBytes >> 2;
      const oi = out >> 2;
      for (let e = 0; e < hd; e++) f[oi + e] = 0;
      for (let j = 0; j < rows; j++) {
        const w = f[(p >> 2) + j]!;
        const vi = (v + j * strideBytes) >> 2;
        for (let e = 0; e < hd; e++) f[oi + e]! += w * f[vi + e]!;
      }
    },
    expSum(p, bytes, shift) {
      const f = floats();
      let sum = 0;
      for (let i = p >> 2; i < (p + bytes) >> 2; i++) {
        const e = Math.exp(f[i]! - shift);
        f[i] = e;
        sum += e;
      }
      return sum;
    },
    siluMul(g, u, out, bytes) {
      const f = floats();
      const gi = g >> 2;
      const ui = u >> 2;
      const oi = out >> 2;
      for (let i = 0; i < bytes >> 2; i++) f[oi + i] = (f[gi + i]! * f[ui + i]!) / (1 + Math.exp(-f[gi + i]!));
    },
  };
}

/**
 * Linear memory with a size-class allocator (power-of-two byte blocks, freed blocks reused) and
 * the row kernels bound to it. Growing the memory detaches old views: always read `floats`.
 */
export class KernelMemory {
  private readonly memory: WasmMemory;
  readonly kernels: RowKernels;
  /** True when the SIMD module is in use (else the plain-JS kernels). */
  readonly simd: boolean;
  private view: Float32Array;
  /** Next unallocated byte; 0 is kept unused so that a pointer is never 0. */
  private top = 64;
  private readonly freeBlocks = new Map<number, number[]>();

  constructor(options: { simd?: boolean } = {}) {
    let instance: { readonly exports: Record<string, unknown> } | undefined;
    if (options.simd !== false) {
      try {
        instance = new wasm.Instance(new wasm.Module(kernelModuleBytes(16)));
      } catch {
        instance = undefined; // an engine without wasm SIMD: the JS kernels below
      }
    }
    if (instance) {
      const exports = instance.exports as {
        memory: WasmMemory;
        dot_rows: RowKernels["dotRows"];
        axpy_rows: RowKernels["axpyRows"];
        exp_sum: RowKernels["expSum"];
        silu_mul: RowKernels["siluMul"];
      };
      this.memory = exports.memory;
      this.kernels = {
        dotRows: exports.dot_rows,
        axpyRows: exports.axpy_rows,
        expSum: exports.exp_sum,
        siluMul: exports.silu_mul,
      };
      this.simd = true;
    } else {
      this.memory = new wasm.Memory({ initial: 16 });
      this.kernels = jsKernels(() => this.floats);
      this.simd = false;
    }
    this.view = new Float32Array(this.memory.buffer);
  }

  /** Float32 view of the whole memory (refreshed after growth). */
  get floats(): Float32Array {
    if (this.view.buffer !== this.memory.buffer) this.view = new Float32Array(this.memory.buffer);
    return this.view;
  }

  /** Bytes a request of `floats` floats occupies (its size class). */
  static blockBytes(floats: number): number {
    return Math.max(64, 2 ** Math.ceil(Math.log2(floats * 4)));
  }

  /** A 16-byte aligned block of at least `floats` floats (contents unspecified); returns its byte offset. */
  alloc(floats: number): number {
    const bytes = KernelMemory.blockBytes(floats);
    const reused = this.freeBlocks.get(bytes)?.pop();
    if (reused !== undefined) return reused;
    const at = this.top;
    const end = at + bytes;
    const size = this.memory.buffer.byteLength;
    // Grown by at least half its size: each grow detaches every view and may move the memory,
    // and a 64-wide decoder's caches grow in hundreds of small allocations.
    if (end > size) this.memory.grow(Math.max(Math.ceil((end - size) / PAGE_BYTES), Math.ceil(size / 2 / PAGE_BYTES)));
    this.top = end;
    return at;
  }

  /** Returns a block from `alloc(floats)` for reuse. */
  free(pointer: number, floats: number): void {
    const bytes = KernelMemory.blockBytes(floats);
    let list = this.freeBlocks.get(bytes);
    if (!list) {
      list = [];
      this.freeBlocks.set(bytes, list);
    }
    list.push(pointer);
  }

  /** Bytes ever taken from the memory (the wasm memory never shrinks). */
  get reservedBytes(): number {
    return this.top;
  }
}
