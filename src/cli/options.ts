/** Parsers for command-line option values: each rejects bad input with one clear line. */
import { InvalidArgumentError } from 'commander';

export function parseInteger(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}`);
    return n;
  };
}

export function parseNumber(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected a number from ${min} to ${max}`);
    }
    return n;
  };
}

export function parseChoice<T extends string>(choices: readonly T[]) {
  return (value: string): T => {
    if (!(choices as readonly string[]).includes(value))
      throw new InvalidArgumentError(`expected one of ${choices.join(', ')}`);
    return value as T;
  };
}
