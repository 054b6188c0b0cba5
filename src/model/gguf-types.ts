/**
 * GGUF metadata values and tensor descriptions, shared by the reader and the writer.
 * Spec: ggml's docs/gguf.md (versions 2 and 3: 64-bit counts and lengths, little endian).
 */
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
export const GGML_TYPE_CODES = { f32: 0, f16: 1, q8_0: 8, bf16: 30 } as const;
export type WeightDType = keyof typeof GGML_TYPE_CODES;

/** Q8_0: blocks of 32 weights, each an f16 scale followed by 32 int8 values (34 bytes). */
export const Q8_0_BLOCK_SIZE = 32;
export const Q8_0_BLOCK_BYTES = 34;

/** Tensor element storage: f32 → Float32Array, f16/bf16 → Uint16Array (raw bits), q8_0 → Uint8Array (raw blocks). */
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
    case 'q8_0':
      return (count / Q8_0_BLOCK_SIZE) * Q8_0_BLOCK_BYTES;
  }
}

/** Typed accessors that fail with the key's name rather than returning undefined. */
export function metaString(meta: GgufMetadata, key: string): string | undefined {
  const v = meta.get(key);
  return v?.type === 'string' ? v.value : undefined;
}

export function metaNumber(meta: GgufMetadata, key: string): number | undefined {
  const v = meta.get(key);
  return v !== undefined && v.type !== 'string' && v.type !== 'bool' && v.type !== 'array' ? v.value : undefined;
}

export function metaBool(meta: GgufMetadata, key: string): boolean | undefined {
  const v = meta.get(key);
  return v?.type === 'bool' ? v.value : undefined;
}

export function metaStringArray(meta: GgufMetadata, key: string): string[] | undefined {
  const v = meta.get(key);
  return v?.type === 'array' && v.itemType === 'string' ? v.value : undefined;
}

export function metaNumberArray(meta: GgufMetadata, key: string): number[] | undefined {
  const v = meta.get(key);
  return v?.type === 'array' && v.itemType !== 'string' && v.itemType !== 'bool' ? v.value : undefined;
}
