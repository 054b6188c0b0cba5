/**
 * Selection over token ids ranked by value (higher first, ties to the lower id — a strict total order, so every result
 * is the same whatever the pivots): the top-k set and the smallest top set holding a share of the mass, each in
 * expected O(n) by partitioning in place, never a sort of the whole vocabulary. A partition loop that runs too long
 * (adversarial values) finishes its range with a sort, so the worst case is O(n log n).
 */

const PARTITION_ROUNDS_MAX = 64;

/** a ranks before b */
function before(values: ArrayLike<number>, a: number, b: number): boolean {
  const va = values[a]!;
  const vb = values[b]!;
  return va > vb || (va === vb && a < b);
}

function swap(ids: Int32Array, i: number, j: number): void {
  const t = ids[i]!;
  ids[i] = ids[j]!;
  ids[j] = t;
}

/** The median of three ids by rank: a deterministic pivot. */
function pivotOf(values: ArrayLike<number>, ids: Int32Array, lo: number, hi: number): number {
  const a = ids[lo]!;
  const b = ids[(lo + hi) >>> 1]!;
  const c = ids[hi - 1]!;
  if (before(values, a, b)) {
    if (before(values, b, c)) return b;
    return before(values, a, c) ? c : a;
  }
  if (before(values, a, c)) return a;
  return before(values, b, c) ? c : b;
}

/** Reorders ids[lo, hi) as [ranked before pivot][pivot][after]; returns the pivot's index. */
function partition(values: ArrayLike<number>, ids: Int32Array, lo: number, hi: number): number {
  const pivot = pivotOf(values, ids, lo, hi);
  let store = lo;
  for (let i = lo; i < hi; i++) {
    if (before(values, ids[i]!, pivot)) swap(ids, i, store++);
  }
  for (let i = store; i < hi; i++) {
    if (ids[i] === pivot) {
      swap(ids, i, store);
      break;
    }
  }
  return store;
}

function sortRange(values: ArrayLike<number>, ids: Int32Array, lo: number, hi: number): void {
  const part = Array.from(ids.subarray(lo, hi)).sort((a, b) => (before(values, a, b) ? -1 : 1));
  ids.set(part, lo);
}

/** Moves the k best of ids[0, n) (by rank) to ids[0, k), in no particular order. */
export function selectTopK(values: ArrayLike<number>, ids: Int32Array, n: number, k: number): void {
  let lo = 0;
  let hi = n;
  for (let round = 0; hi - lo > 1; round++) {
    if (round >= PARTITION_ROUNDS_MAX) {
      sortRange(values, ids, lo, hi);
      return;
    }
    const p = partition(values, ids, lo, hi);
    if (p === k || p + 1 === k) return;
    if (p > k) hi = p;
    else lo = p + 1;
  }
}

/**
 * The smallest count c such that the c best of ids[0, n) carry at least `need` of `weights` (ids[0, c) holds them on
 * return); n when even all of them carry less. Masses are summed in f64, partition by partition.
 */
export function selectTopMass(
  values: ArrayLike<number>,
  weights: Float64Array,
  ids: Int32Array,
  n: number,
  need: number,
): number {
  let lo = 0;
  let hi = n;
  let left = need;
  for (let round = 0; hi > lo; round++) {
    if (round >= PARTITION_ROUNDS_MAX) {
      sortRange(values, ids, lo, hi);
      for (let i = lo; i < hi; i++) {
        left -= weights[ids[i]!]!;
        if (left <= 0) return i + 1;
      }
      return n;
    }
    const p = partition(values, ids, lo, hi);
    let mass = 0;
    for (let i = lo; i < p; i++) mass += weights[ids[i]!]!;
    if (mass >= left) {
      hi = p; // the cut lies among the better part
      continue;
    }
    left -= mass + weights[ids[p]!]!;
    if (left <= 0) return p + 1;
    lo = p + 1;
  }
  return lo;
}
