import * as tf from "@tensorflow/tfjs";
import { ModelConfig } from "../config/policy.ts";
import { AgentRlError } from "../errors.ts";
import { backendInfo } from "./backend.ts";
import { KvDecoder } from "./decoder.ts";
import { DeviceDecoder } from "./deviceDecoder.ts";
import { dataOnHost } from "./deviceOps.ts";
import { attention, type Dims, embed, linear, RotaryTable, rmsNorm, swiglu, tokenLogProbs } from "./ops.ts";
import type { Decoder, InferencePolicy, TrainablePolicy } from "./types.ts";

/** Adam and micro-batching settings; field names match TrainerConfig so a trainer can pass its config. */
export interface OptimizerOptions {
  learningRate: number;
  adamBeta1: number;
  adamBeta2: number;
  /** Added to √v̂. */
  adamEps: number;
  /** Global gradient-norm clip (the norm is reported before clipping). */
  gradClip: number;
  /** Most tokens packed into one forward/backward micro-batch. */
  microBatchTokens: number;
}

export const DEFAULT_OPTIMIZER: OptimizerOptions = {
  learningRate: 1e-4,
  adamBeta1: 0.9,
  adamBeta2: 0.999,
  adamEps: 1e-8,
  gradClip: 1,
  microBatchTokens: 4096,
};

/** Adam's first and second moments per parameter, and the number of updates they hold. */
export interface OptimizerState {
  t: number;
  m: ReadonlyMap<string, Float32Array>;
  v: ReadonlyMap<string, Float32Array>;
}

/** Raised for sequences or tokens the model cannot take (empty, too long, outside the vocabulary). */
export class ModelInputError extends AgentRlError {
  override readonly name = "ModelInputError";
}

/**
 * Parameter names and shapes, in checkpoint order. Matrices are stored [in, out] (x·W), the
 * q|k|v projections fused: `layers.{i}.attn.wqkv` is [d, (heads + 2·kvHeads)·headDim].
 */
export function parameterShapes(config: ModelConfig): Array<{ name: string; shape: number[] }> {
  const d = config.dModel;
  const hd = d / config.heads;
  const shapes: Array<{ name: string; shape: number[] }> = [{ name: "embed", shape: [config.vocabSize, d] }];
  for (let i = 0; i < config.layers; i++) {
    shapes.push(
      { name: `layers.${i}.attn_norm`, shape: [d] },
      { name: `layers.${i}.attn.wqkv`, shape: [d, (config.heads + 2 * config.kvHeads) * hd] },
      ...(config.qkvBias ? [{ name: `layers.${i}.attn.bqkv`, shape: [(config.heads + 2 * config.kvHeads) * hd] }] : []),
      { name: `layers.${i}.attn.wo`, shape: [config.heads * hd, d] },
      { name: `layers.${i}.ffn_norm`, shape: [d] },
      { name: `layers.${i}.ffn.w_gate`, shape: [d, config.ffnHidden] },
      { name: `layers.${i}.ffn.w_up`, shape: [d, config.ffnHidden] },
      { name: `layers.${i}.ffn.w_down`, shape: [config.ffnHidden, d] },
    );
  }
  shapes.push({ name: "final_norm", shape: [d] });
  if (!config.tieEmbeddings) shapes.push({ name: "lm_head", shape: [d, config.vocabSize] });
  return shapes;
}

/** mulberry32: small, fast, reproducible across platforms. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Deterministic initial values: norms 1, matrices N(0, 0.02²), residual outputs scaled by 1/√(2·layers) (GPT-2). */
export function initialValues(config: ModelConfig, seed: number): Map<string, Float32Array> {
  const random = prng(seed);
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const values = new Map<string, Float32Array>();
  for (const { name, shape } of parameterShapes(config)) {
    const size = shape.reduce((a, b) => a * b, 1);
    const out = new Float32Array(size);
    // Biases start at 0, norm gains at 1.
    if (name.endsWith("bqkv")) out.fill(0);
    else if (shape.length === 1) out.fill(1);
    else {
      const std = name.endsWith("wo") || name.endsWith("w_down") ? 0.02 / Math.sqrt(2 * config.layers) : 0.02;
      for (let i = 0; i < size; i++) out[i] = normal() * std;
    }
    values.set(name, out);
  }
  return values;
}

interface LayerParams {
  attnNorm: tf.Variable;
  wqkv: tf.Variable;
  /** q|k|v bias [qkvWidth] when config.qkvBias. */
  bqkv: tf.Variable | undefined;
  wo: tf.Variable;
  ffnNorm: tf.Variable;
  wGate: tf.Variable;
  wUp: tf.Variable;
  wDown: tf.Variable;
}

/** Per-token attention callback: the training path, a prefill writing the KV cache, or a cached decode step. */
export type AttendFn = (layer: number, qkv: tf.Tensor2D) => tf.Tensor2D;

/**
 * The decoder-only transformer: one object serves as InferencePolicy (createDecoder) and as
 * TrainablePolicy (logProbs, trainStep with Adam + global-norm clipping, snapshot).
 */
export class TransformerPolicy implements InferencePolicy, TrainablePolicy {
  readonly config: ModelConfig;
  readonly dims: Dims;
  readonly rope: RotaryTable;
  /** Parameters in checkpoint order. */
  readonly params: ReadonlyMap<string, tf.Variable>;
  readonly trainable: boolean;
  optimizer: OptimizerOptions;
  /** Optimizer steps taken by this object. */
  step = 0;
  private readonly layerParams: LayerParams[];
  private readonly embedTable: tf.Variable;
  private readonly finalNorm: tf.Variable;
  /** Undefined with tied embeddings: the head is then the transposed embedding table. */
  private readonly lmHead: tf.Variable | undefined;
  /** Adam's moments, on the device beside the weights (never copied to the host during a step). */
  private adamM: Map<string, tf.Variable> | undefined;
  private adamV: Map<string, tf.Variable> | undefined;
  /** Updates folded into adamM/adamV (bias correction); separate from `step`, which a checkpoint restores without moments. */
  private adamT = 0;
  private disposed = false;

  constructor(
    config: ModelConfig,
    values: ReadonlyMap<string, Float32Array>,
    readonly version: number,
    options: { trainable: boolean; optimizer?: Partial<OptimizerOptions>; rope?: RotaryTable },
  ) {
    if (!backendInfo())
      throw new AgentRlError("no TF.js backend selected: await initBackend(preference) before creating a policy");
    this.config = config;
    const hd = config.dModel / config.heads;
    this.dims = {
      dModel: config.dModel,
      heads: config.heads,
      kvHeads: config.kvHeads,
      headDim: hd,
      qkvWidth: (config.heads + 2 * config.kvHeads) * hd,
      ffnHidden: config.ffnHidden,
      vocabSize: config.vocabSize,
      normEps: config.normEps,
    };
    this.rope = options.rope ?? new RotaryTable(config.contextLength, hd, config.ropeTheta);
    this.trainable = options.trainable;
    this.optimizer = { ...DEFAULT_OPTIMIZER, ...options.optimizer };
    const params = new Map<string, tf.Variable>();
    for (const { name, shape } of parameterShapes(config)) {
      const value = values.get(name);
      const size = shape.reduce((a, b) => a * b, 1);
      if (!value || value.length !== size)
        throw new ModelInputError(
          `parameter ${name}: expected ${size} values of shape [${shape}], got ${value?.length ?? "none"}`,
        );
      const initial = tf.tensor(value, shape, "float32");
      params.set(name, tf.variable(initial, options.trainable));
      // The variable holds its own reference to the data.
      initial.dispose();
    }
    this.params = params;
    const p = (name: string) => params.get(name)!;
    this.embedTable = p("embed");
    this.finalNorm = p("final_norm");
    this.lmHead = config.tieEmbeddings ? undefined : p("lm_head");
    this.layerParams = Array.from({ length: config.layers }, (_, i) => ({
      attnNorm: p(`layers.${i}.attn_norm`),
      wqkv: p(`layers.${i}.attn.wqkv`),
      bqkv: config.qkvBias ? p(`layers.${i}.attn.bqkv`) : undefined,
      wo: p(`layers.${i}.attn.wo`),
      ffnNorm: p(`layers.${i}.ffn_norm`),
      wGate: p(`layers.${i}.ffn.w_gate`),
      wUp: p(`layers.${i}.ffn.w_up`),
      wDown: p(`layers.${i}.ffn.w_down`),
    }));
  }

  /** Runs the blocks over packed token rows and returns the final-normed hidden state [N, d]. */
  hidden(ids: Int32Array, attend: AttendFn): tf.Tensor2D {
    const eps = this.config.normEps;
    let x = embed(this.embedTable as tf.Tensor2D, ids);
    for (let i = 0; i < this.layerParams.length; i++) {
      const l = this.layerParams[i]!;
      const projected = linear(rmsNorm(x, l.attnNorm as tf.Tensor1D, eps), l.wqkv as tf.Tensor2D);
      const qkv = l.bqkv ? (tf.add(projected, l.bqkv) as tf.Tensor2D) : projected;
      x = tf.add(x, linear(attend(i, qkv), l.wo as tf.Tensor2D));
      const h = rmsNorm(x, l.ffnNorm as tf.Tensor1D, eps);
      const ffn = swiglu(linear(h, l.wGate as tf.Tensor2D), linear(h, l.wUp as tf.Tensor2D));
      x = tf.add(x, linear(ffn, l.wDown as tf.Tensor2D));
    }
    return rmsNorm(x, this.finalNorm as tf.Tensor1D, eps);
  }

  /** Vocabulary logits [N, V] from hidden rows. */
  head(hidden: tf.Tensor2D): tf.Tensor2D {
    // An explicit transpose keeps the fast `linear` kernels (see its comment).
    const weight = this.lmHead ?? tf.transpose(this.embedTable);
    return linear(hidden, weight as tf.Tensor2D);
  }

  /** Checks a token sequence fits this model; throws ModelInputError naming the problem. */
  validateTokens(tokens: ArrayLike<number>, what: string, minLength = 1): void {
    if (tokens.length < minLength) throw new ModelInputError(`${what}: needs at least ${minLength} token(s)`);
    if (tokens.length > this.config.contextLength)
      throw new ModelInputError(
        `${what}: ${tokens.length} tokens exceed the context length ${this.config.contextLength}`,
      );
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= this.config.vocabSize)
        throw new ModelInputError(
          `${what}[${i}]: token ${t} is outside the vocabulary 0..${this.config.vocabSize - 1}`,
        );
    }
  }

  /** Splits row indices into micro-batches of at most `microBatchTokens` packed tokens (at least one row each). */
  private microBatches(sequences: readonly Int32Array[]): number[][] {
    const batches: number[][] = [];
    let current: number[] = [];
    let tokens = 0;
    sequences.forEach((seq, i) => {
      if (current.length > 0 && tokens + seq.length > this.optimizer.microBatchTokens) {
        batches.push(current);
        current = [];
        tokens = 0;
      }
      current.push(i);
      tokens += seq.length;
    });
    if (current.length > 0) batches.push(current);
    return batches;
  }

  /** Per-token log-probs [b, T] (padded with 0) for a micro-batch, through the differentiable path. */
  private logProbGrid(sequences: readonly Int32Array[], rows: readonly number[], temperature: number): tf.Tensor2D {
    const seqs = rows.map((r) => sequences[r]!);
    const lens = seqs.map((s) => s.length);
    const total = lens.reduce((a, b) => a + b, 0);
    const width = Math.max(...lens);
    const ids = new Int32Array(total);
    const source = new Int32Array(rows.length * width).fill(-1);
    const targets = new Int32Array(rows.length * width);
    let offset = 0;
    seqs.forEach((seq, b) => {
      ids.set(seq, offset);
      // Cell (b, t) for t ≥ 1 is predicted by row t−1 of its sequence.
      for (let t = 1; t < seq.length; t++) {
        source[b * width + t] = offset + t - 1;
        targets[b * width + t] = seq[t]!;
      }
      offset += seq.length;
    });
    const hidden = this.hidden(ids, (_, qkv) => attention(qkv, lens, this.dims, this.rope));
    return tokenLogProbs(this.head(hidden), source, targets, [rows.length, width], temperature);
  }

  private checkTemperature(temperature: number): void {
    if (!(temperature > 0) || !Number.isFinite(temperature))
      throw new ModelInputError(`temperature: ${temperature} is not allowed (must be a finite number > 0)`);
  }

  logProbs(sequences: readonly Int32Array[], temperature: number): Float32Array[] {
    this.assertLive();
    this.checkTemperature(temperature);
    for (const [i, s] of sequences.entries()) this.validateTokens(s, `sequences[${i}]`);
    const out: Float32Array[] = new Array(sequences.length);
    for (const rows of this.microBatches(sequences)) {
      const grid = tf.tidy(() => this.logProbGrid(sequences, rows, temperature));
      const values = grid.dataSync() as Float32Array;
      const width = grid.shape[1];
      grid.dispose();
      rows.forEach((r, b) => {
        out[r] = values.slice(b * width, b * width + sequences[r]!.length);
      });
    }
    return out;
  }

  /**
   * The summed gradient of `loss` over all micro-batches, per parameter (checkpoint order), without
   * touching the weights, copied to the host. trainStep is this plus clipping and Adam, on the device.
   */
  gradients(
    sequences: readonly Int32Array[],
    temperature: number,
    loss: (logp: tf.Tensor2D, rows: readonly number[]) => tf.Scalar,
  ): { loss: number; grads: Map<string, Float32Array> } {
    const { loss: total, grads } = this.accumulateGradients(sequences, temperature, loss);
    const host = new Map<string, Float32Array>();
    for (const [name, grad] of grads) {
      host.set(name, Float32Array.from(grad.dataSync() as Float32Array));
      grad.dispose();
    }
    return { loss: total, grads: host };
  }

  /**
   * Gradient accumulation on the device: each micro-batch's gradients are added into one tensor
   * per parameter; only the summed loss (a scalar) is read back. The caller owns the tensors.
   */
  private accumulateGradients(
    sequences: readonly Int32Array[],
    temperature: number,
    loss: (logp: tf.Tensor2D, rows: readonly number[]) => tf.Scalar,
  ): { loss: number; grads: Map<string, tf.Tensor> } {
    this.assertLive();
    if (!this.trainable) throw new ModelInputError("trainStep: this policy is a frozen snapshot");
    this.checkTemperature(temperature);
    if (sequences.length === 0) throw new ModelInputError("trainStep: sequences is empty");
    for (const [i, s] of sequences.entries()) this.validateTokens(s, `sequences[${i}]`, 2);
    const variables = [...this.params.entries()];
    const grads = new Map<string, tf.Tensor>();
    let lossSum: tf.Tensor | undefined;
    try {
      for (const rows of this.microBatches(sequences)) {
        const { value, grads: g } = tf.variableGrads(
          () => loss(this.logProbGrid(sequences, rows, temperature), rows),
          variables.map(([, v]) => v),
        );
        lossSum = lossSum ? addInto(lossSum, value) : value;
        for (const [name, v] of variables) {
          const grad = g[v.name];
          if (!grad) continue;
          const sum = grads.get(name);
          grads.set(name, sum ? addInto(sum, grad) : grad);
        }
      }
      for (const [name, v] of variables) if (!grads.has(name)) grads.set(name, tf.zerosLike(v));
      return { loss: (lossSum as tf.Tensor).dataSync()[0]!, grads };
    } catch (error) {
      for (const grad of grads.values()) grad.dispose();
      throw error;
    } finally {
      lossSum?.dispose();
    }
  }

  trainStep(
    sequences: readonly Int32Array[],
    temperature: number,
    loss: (logp: tf.Tensor2D, rows: readonly number[]) => tf.Scalar,
  ): { loss: number; gradNorm: number } {
    const { loss: total, grads } = this.accumulateGradients(sequences, temperature, loss);
    try {
      return { loss: total, gradNorm: this.applyAdam(grads) };
    } finally {
      for (const grad of grads.values()) grad.dispose();
    }
  }

  /**
   * One optimizer step (clipping + Adam, as in trainStep) with gradients computed elsewhere: the
   * summed host gradients of data-parallel shards (shared/model/dataParallel.ts). Returns the
   * norm before clipping; a non-finite norm throws and leaves the weights unchanged.
   */
  applyGradients(grads: ReadonlyMap<string, Float32Array>): number {
    this.assertLive();
    if (!this.trainable) throw new ModelInputError("applyGradients: this policy is a frozen snapshot");
    const device = new Map<string, tf.Tensor>();
    try {
      for (const [name, variable] of this.params) {
        const grad = grads.get(name);
        if (!grad || grad.length !== variable.size)
          throw new ModelInputError(
            `applyGradients: ${name} needs ${variable.size} values, got ${grad?.length ?? "none"}`,
          );
        device.set(name, tf.tensor(grad, variable.shape, "float32"));
      }
      return this.applyAdam(device);
    } finally {
      for (const grad of device.values()) grad.dispose();
    }
  }

  /**
   * Global-norm clipping and one bias-corrected Adam update, as TF.js ops on the device: the
   * weights and moments never leave it; only the gradient norm (one scalar) is read back, to
   * report it and to refuse a non-finite step.
   */
  private applyAdam(grads: ReadonlyMap<string, tf.Tensor>): number {
    const { learningRate: lr, adamBeta1: b1, adamBeta2: b2, adamEps: eps, gradClip } = this.optimizer;
    const squared = tf.tidy(() => tf.addN([...grads.values()].map((g) => tf.sum(tf.square(g)))));
    const gradNorm = Math.sqrt(squared.dataSync()[0]!);
    squared.dispose();
    if (!Number.isFinite(gradNorm))
      throw new AgentRlError(`trainStep: gradient norm is ${gradNorm}; weights left unchanged`);
    const clip = gradNorm > gradClip ? gradClip / gradNorm : 1;
    if (!this.adamM || !this.adamV) {
      this.adamM = this.zeroMoments();
      this.adamV = this.zeroMoments();
      this.adamT = 0;
    }
    this.step += 1;
    this.adamT += 1;
    const c1 = 1 - b1 ** this.adamT;
    const c2 = 1 - b2 ** this.adamT;
    for (const [name, variable] of this.params) {
      const m = this.adamM.get(name)!;
      const v = this.adamV.get(name)!;
      tf.tidy(() => {
        const g = tf.mul(grads.get(name)!, clip);
        const nextM = tf.add(tf.mul(m, b1), tf.mul(g, 1 - b1));
        const nextV = tf.add(tf.mul(v, b2), tf.mul(tf.square(g), 1 - b2));
        const update = tf.div(tf.mul(nextM, lr / c1), tf.add(tf.sqrt(tf.div(nextV, c2)), eps));
        m.assign(nextM);
        v.assign(nextV);
        variable.assign(tf.sub(variable, update));
      });
    }
    return gradNorm;
  }

  private zeroMoments(): Map<string, tf.Variable> {
    return new Map(
      [...this.params].map(([name, p]) => {
        const zeros = tf.zerosLike(p);
        const moment = tf.variable(zeros, false);
        zeros.dispose();
        return [name, moment] as const;
      }),
    );
  }

  private disposeMoments(): void {
    for (const moments of [this.adamM, this.adamV]) for (const m of moments?.values() ?? []) m.dispose();
    this.adamM = undefined;
    this.adamV = undefined;
  }

  /** Adam moments and their update count (copied to the host, for a checkpoint), or undefined before the first step. */
  optimizerState(): OptimizerState | undefined {
    if (!this.adamM || !this.adamV) return undefined;
    const copy = (moments: Map<string, tf.Variable>) =>
      new Map([...moments].map(([name, m]) => [name, Float32Array.from(m.dataSync() as Float32Array)]));
    return { t: this.adamT, m: copy(this.adamM), v: copy(this.adamV) };
  }

  /** Restores Adam moments (e.g. from a checkpoint) so a resumed run continues the same update rule. */
  setOptimizerState(state: OptimizerState): void {
    for (const [name, variable] of this.params) {
      for (const [which, map] of [
        ["m", state.m],
        ["v", state.v],
      ] as const) {
        const value = map.get(name);
        if (!value || value.length !== variable.size)
          throw new ModelInputError(
            `optimizer state ${which}.${name}: expected ${variable.size} values, got ${value?.length ?? "none"}`,
          );
      }
    }
    if (!Number.isInteger(state.t) || state.t < 1)
      throw new ModelInputError(`optimizer state t: ${state.t} is not allowed (must be an integer ≥ 1)`);
    this.disposeMoments();
    const upload = (map: ReadonlyMap<string, Float32Array>) =>
      new Map(
        [...this.params].map(([name, p]) => {
          const initial = tf.tensor(map.get(name)!, p.shape, "float32");
          const variable = tf.variable(initial, false);
          initial.dispose();
          return [name, variable] as const;
        }),
      );
    this.adamM = upload(state.m);
    this.adamV = upload(state.v);
    this.adamT = state.t;
  }

  /** Current parameter values, copied out (checkpoint order). */
  values(): Map<string, Float32Array> {
    return new Map([...this.params].map(([name, v]) => [name, Float32Array.from(v.dataSync() as Float32Array)]));
  }

  snapshot(): TransformerPolicy {
    this.assertLive();
    return new TransformerPolicy(this.config, this.values(), this.version, { trainable: false, rope: this.rope });
  }

  /** An inference copy of the current weights labelled with `version` (what a trainer publishes). */
  withVersion(version: number): TransformerPolicy {
    this.assertLive();
    return new TransformerPolicy(this.config, this.values(), version, { trainable: false, rope: this.rope });
  }

  /** A KV-cache decoder: on wasm/cpu the host-resident one, on a device backend the one whose caches stay there. */
  createDecoder(capacity: number): Decoder {
    this.assertLive();
    return dataOnHost() ? new KvDecoder(this, capacity) : new DeviceDecoder(this, capacity);
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  private assertLive(): void {
    if (this.disposed) throw new AgentRlError("policy used after dispose()");
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const v of this.params.values()) v.dispose();
    this.disposeMoments();
  }
}

/** `sum + addend` as a new tensor; both inputs are disposed (running sums without leaks). */
function addInto(sum: tf.Tensor, addend: tf.Tensor): tf.Tensor {
  const next = tf.add(sum, addend);
  sum.dispose();
  addend.dispose();
  return next;
}

/** Options for createPolicy. */
export interface CreatePolicyOptions {
  /** Version label of the weights (0 for a fresh init). @default 0 */
  version?: number;
  /** @default true */
  trainable?: boolean;
  optimizer?: Partial<OptimizerOptions>;
}

/**
 * A freshly initialised policy with deterministic weights for `seed`. Call `initBackend` first.
 * @example const policy = createPolicy(ModelConfig.parse({ layers: 2 }), 7); policy.logProbs([Int32Array.of(1, 2, 3)], 1)
 */
export function createPolicy(
  config: ModelConfig | Partial<ModelConfig>,
  seed: number,
  options: CreatePolicyOptions = {},
): TransformerPolicy {
  const parsed = ModelConfig.parse(config);
  return new TransformerPolicy(parsed, initialValues(parsed, seed), options.version ?? 0, {
    trainable: options.trainable ?? true,
    optimizer: options.optimizer,
  });
}
