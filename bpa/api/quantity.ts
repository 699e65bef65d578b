/**
 * Kubernetes resource quantities ("4Gi", "512Mi", "8G", "1.5Gi", "4096", "2e9"), as the
 * API server writes them (k8s.io/apimachinery/pkg/api/resource). Only what a memory
 * requirement needs: parse to bytes, print back in a short canonical form.
 */

const BINARY: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};
const DECIMAL: Record<string, number> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

/** The quantity grammar of apimachinery, anchored. */
export const QUANTITY_PATTERN = /^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$/;

export class QuantityError extends Error {}

/**
 * Parses a quantity to a whole number of bytes (rounded up, as Kubernetes rounds a
 * quantity up to its smallest unit when it asks for an integer). A number is taken as
 * bytes. Throws QuantityError on anything else, on negative values, and on values too
 * large to be exact in a double (more than 8 PiB).
 */
export function parseQuantityBytes(value: string | number): number {
  let bytes: number;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new QuantityError(`${value} is not a finite number`);
    bytes = value;
  } else {
    const text = value.trim();
    const match = QUANTITY_PATTERN.exec(text);
    if (!match) {
      throw new QuantityError(`"${value}" is not a Kubernetes quantity (examples: 4Gi, 512Mi, 8G, 1.5Gi, 4294967296)`);
    }
    const number = Number(match[1]);
    const suffix = match[2] ?? "";
    if (suffix in BINARY) bytes = number * BINARY[suffix]!;
    else if (suffix in DECIMAL) bytes = number * DECIMAL[suffix]!;
    else bytes = number * 10 ** Number(suffix.slice(1)); // decimal exponent e3, E-2, ...
  }
  if (bytes < 0) throw new QuantityError(`"${value}" is negative`);
  // Guard against float noise such as 1.1Gi * 2^30 = 1181116006.4000001 before rounding up.
  const rounded = Math.ceil(bytes - 1e-6);
  if (!Number.isSafeInteger(rounded) || rounded > 2 ** 53) {
    throw new QuantityError(`"${value}" is too large (more than 8 PiB)`);
  }
  return Math.max(0, rounded);
}

/** Short human form of a byte count: the largest binary unit (Mi or more) that divides it exactly, else Gi/Mi with decimals. */
export function formatBytes(bytes: number): string {
  if (bytes === 0) return "0";
  for (const unit of ["Ei", "Pi", "Ti", "Gi", "Mi"] as const) {
    const size = BINARY[unit]!;
    if (bytes % size === 0) return `${bytes / size}${unit}`;
  }
  if (bytes < 2 ** 20 && bytes % 1024 === 0) return `${bytes / 1024}Ki`;
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)}Gi`;
  if (bytes >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(2)}Mi`;
  return `${bytes}`;
}

/** MiB (as BareMetalHost reports RAM) to bytes. */
export function mebibytesToBytes(mib: number): number {
  return mib * 2 ** 20;
}
