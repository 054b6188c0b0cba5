/**
 * GGUF metadata values and tensor descriptions, shared by the reader and the writer.
 * Spec: ggml's docs/gguf.md (versions 2 and 3: 64-bit counts and lengths, little endian).
 */
import { KvfenceError } from '../util/errors.js';

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** Scalar value types, with their on-disk codes. */
export const GGUF_VALUE_CODES = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

export type GgufNumberType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'u64' | 'i64' | 'f64';
export type GgufScalarType = GgufNumberType | 'bool' | 'string';

export type GgufValue =
  | { type: 'string'; value: string }
  | { type: 'bool'; value: boolean }
  | { type: GgufNumberType; value: number }
  | { type: 'array'; itemType: 'string'; value: string[] }
  | { type: 'array'; itemType: 'bool'; value: boolean[] }
  | { type: 'array'; itemType: GgufNumberType; value: number[] };

export type GgufMetadata = Map<string, GgufValue>;

/** Weight types kvfence reads and writes, with ggml's type codes. */
export const GGML_TYPE_CODES = {
  f32: 0,
  f16: 1,
  q4_0: 2,
  q4_1: 3,
  q5_0: 6,
  q5_1: 7,
  q8_0: 8,
  q2_k: 10,
  q3_k: 11,
  q4_k: 12,
  q5_k: 13,
  q6_k: 14,
  bf16: 30,
} as const;
export type WeightDType = keyof typeof GGML_TYPE_CODES;
export type QuantizedDType = Exclude<WeightDType, 'f32' | 'f16' | 'bf16'>;

/**
 * Block formats of the quantized types, as ggml lays them out (ggml-common.h): `size` values per block stored in
 * `bytes` bytes. The K-quants are 256-value super-blocks.
 */
export const QUANT_BLOCKS: Readonly<Record<QuantizedDType, { size: number; bytes: number }>> = {
  q4_0: { size: 32, bytes: 18 }, // f16 d, 16 bytes of nibbles
  q4_1: { size: 32, bytes: 20 }, // f16 d, f16 m, 16 bytes of nibbles
  q5_0: { size: 32, bytes: 22 }, // f16 d, 32 high bits, 16 bytes of nibbles
  q5_1: { size: 32, bytes: 24 }, // f16 d, f16 m, 32 high bits, 16 bytes of nibbles
  q8_0: { size: 32, bytes: 34 }, // f16 d, 32 int8
  q2_k: { size: 256, bytes: 84 }, // 16 scale/min bytes, 64 bytes of 2-bit quants, f16 d, f16 dmin
  q3_k: { size: 256, bytes: 110 }, // 32 bytes high bits, 64 bytes low 2 bits, 12 bytes 6-bit scales, f16 d
  q4_k: { size: 256, bytes: 144 }, // f16 d, f16 dmin, 12 bytes 6-bit scales/mins, 128 bytes of nibbles
  q5_k: { size: 256, bytes: 176 }, // f16 d, f16 dmin, 12 bytes scales/mins, 32 bytes high bits, 128 bytes nibbles
  q6_k: { size: 256, bytes: 210 }, // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
};

export function isQuantized(dtype: WeightDType): dtype is QuantizedDType {
  return dtype !== 'f32' && dtype !== 'f16' && dtype !== 'bf16';
}

/** Values per block: what a row's length must be a multiple of (1 for the float types). */
export function blockSize(dtype: WeightDType): number {
  return isQuantized(dtype) ? QUANT_BLOCKS[dtype].size : 1;
}

/** ggml's names of the types kvfence does not read, so a refusal can name the type (ggml.c type_traits). */
export const GGML_UNSUPPORTED_TYPE_NAMES: ReadonlyMap<number, string> = new Map([
  [9, 'q8_1'],
  [15, 'q8_K'],
  [16, 'iq2_xxs'],
  [17, 'iq2_xs'],
  [18, 'iq3_xxs'],
  [19, 'iq1_s'],
  [20, 'iq4_nl'],
  [21, 'iq3_s'],
  [22, 'iq2_s'],
  [23, 'iq4_xs'],
  [24, 'i8'],
  [25, 'i16'],
  [26, 'i32'],
  [27, 'i64'],
  [28, 'f64'],
  [29, 'iq1_m'],
  [34, 'tq1_0'],
  [35, 'tq2_0'],
  [39, 'mxfp4'],
  [40, 'nvfp4'],
  [41, 'q1_0'],
  [42, 'q2_0'],
]);

/** Q8_0: blocks of 32 weights, each an f16 scale followed by 32 int8 values (34 bytes). */
export const Q8_0_BLOCK_SIZE = 32;
export const Q8_0_BLOCK_BYTES = 34;

/** Tensor element storage: f32 → Float32Array, f16/bf16 → Uint16Array (raw bits), quantized → Uint8Array (blocks). */
export type TensorData = Float32Array | Uint16Array | Uint8Array;

export interface GgufTensor {
  name: string;
  dtype: WeightDType;
  /** ggml order: dims[0] is the contiguous (innermost) dimension. */
  dims: number[];
  data: TensorData;
}

export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

export function tensorByteSize(dtype: WeightDType, count: number): number {
  switch (dtype) {
    case 'f32':
      return count * 4;
    case 'f16':
    case 'bf16':
      return count * 2;
    default:
      return (count / QUANT_BLOCKS[dtype].size) * QUANT_BLOCKS[dtype].bytes;
  }
}

/**
 * Typed accessors: undefined when the key is absent; a key present with another type is the file's error (as llama.cpp
 * refuses it), never read as absent, which would quietly put a default in its place. Numbers are read from any of the
 * numeric types, as the converters write ids and counts as u32, i32 or u64 alike.
 */
function wrongType(key: string, value: GgufValue, expected: string): KvfenceError {
  const actual = value.type === 'array' ? `array of ${value.itemType}` : value.type;
  return new KvfenceError('invalid_model_file', `metadata ${key} has type ${actual}, expected ${expected}`);
}

export function metaString(meta: GgufMetadata, key: string): string | undefined {
  const v = meta.get(key);
  if (v === undefined || v.type === 'string') return v?.value;
  throw wrongType(key, v, 'string');
}

export function metaNumber(meta: GgufMetadata, key: string): number | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (v.type === 'string' || v.type === 'bool' || v.type === 'array') throw wrongType(key, v, 'a number type');
  return v.value;
}

export function metaBool(meta: GgufMetadata, key: string): boolean | undefined {
  const v = meta.get(key);
  if (v === undefined || v.type === 'bool') return v?.value;
  throw wrongType(key, v, 'bool');
}

export function metaStringArray(meta: GgufMetadata, key: string): string[] | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (v.type === 'array' && v.itemType === 'string') return v.value;
  throw wrongType(key, v, 'array of string');
}

export function metaNumberArray(meta: GgufMetadata, key: string): number[] | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (v.type !== 'array' || v.itemType === 'string' || v.itemType === 'bool') {
    throw wrongType(key, v, 'array of a number type');
  }
  return v.value;
}
