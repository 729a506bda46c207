/**
 * Small statistics used by the estimators.
 *
 * Means are computed shifted by the first value, m = x0 + Σ(x − x0)/n: the
 * result is exactly x0 when all values are equal, so identical rewards give
 * advantages of exactly 0 (a plain Σx/n of [0.1, 0.1, 0.1] is not 0.1).
 */

export function mean(xs: ArrayLike<number>): number {
  const n = xs.length;
  if (n === 0) return 0;
  const x0 = xs[0]!;
  let acc = 0;
  for (let i = 1; i < n; i++) acc += xs[i]! - x0;
  return x0 + acc / n;
}

/** Unbiased (n − 1) standard deviation around `m`; 0 when n < 2. */
export function unbiasedStd(xs: ArrayLike<number>, m: number): number {
  return xs.length < 2 ? 0 : Math.sqrt(squaredDeviations(xs, m) / (xs.length - 1));
}

/** Population (n) standard deviation around `m` (torch's `unbiased=False`); 0 when n < 2. */
export function populationStd(xs: ArrayLike<number>, m: number): number {
  return xs.length < 2 ? 0 : Math.sqrt(squaredDeviations(xs, m) / xs.length);
}

function squaredDeviations(xs: ArrayLike<number>, m: number): number {
  let acc = 0;
  for (let i = 0; i < xs.length; i++) {
    const d = xs[i]! - m;
    acc += d * d;
  }
  return acc;
}

/** Weighted mean, shifted like `mean`; 0 when the total weight is 0. */
export function weightedMean(xs: ArrayLike<number>, ws: ArrayLike<number>): number {
  let total = 0;
  let acc = 0;
  let x0 = 0;
  let seen = false;
  for (let i = 0; i < xs.length; i++) {
    if (ws[i] === 0) continue;
    if (!seen) {
      x0 = xs[i]!;
      seen = true;
    }
    total += ws[i]!;
    acc += ws[i]! * (xs[i]! - x0);
  }
  return total === 0 ? 0 : x0 + acc / total;
}

/**
 * Lower median: the value at sorted position ⌊(n − 1)/2⌋. For odd n this is
 * the median; for even n it is the lower of the two middle values, so it is
 * always one of the inputs.
 */
export function lowerMedian(xs: ArrayLike<number>): number {
  const sorted = Float64Array.from(xs).sort();
  return sorted[(sorted.length - 1) >> 1]!;
}
