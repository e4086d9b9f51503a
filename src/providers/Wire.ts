/**
 * The one set of readers for upstream answers, shared by every provider type. Wire data is parsed
 * JSON (`unknown`); each provider reads the fields it needs through these, once per network read,
 * into canonical events. Anything of an unexpected type reads as absent.
 */

/** A JSON object, or undefined. */
export const obj = (v: unknown): Record<string, unknown> | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined

/** A string, or undefined. */
export const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined)

/** A finite number, or undefined. */
export const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined)

/** A count: a finite number, or 0. */
export const count = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0)
