/**
 * Model ids: an alias, or `<provider>/<model>` (the model may itself hold `/`), either with an
 * optional `#<variant>` suffix. Glob aliases such as `claude-*` carry the `*` into their target.
 */

export interface ParsedModelId {
  /** the id without its variant */
  readonly base: string
  readonly variant?: string
}

/** Split off the `#variant` suffix (the last `#`). An empty variant is no variant. */
export const parseModelId = (id: string): ParsedModelId => {
  const hash = id.lastIndexOf("#")
  if (hash < 0) return { base: id }
  const variant = id.slice(hash + 1)
  return variant === "" ? { base: id.slice(0, hash) } : { base: id.slice(0, hash), variant }
}

/** Split `<provider>/<model>` at the first `/`; undefined when there is none or either side is empty. */
export const splitProvider = (base: string): { readonly provider: string; readonly model: string } | undefined => {
  const slash = base.indexOf("/")
  if (slash <= 0 || slash === base.length - 1) return undefined
  return { provider: base.slice(0, slash), model: base.slice(slash + 1) }
}

/** Match a pattern with at most one `*` (any run of characters) and return what `*` matched. */
export const globCapture = (pattern: string, value: string): string | undefined => {
  const star = pattern.indexOf("*")
  if (star < 0) return pattern === value ? "" : undefined
  const prefix = pattern.slice(0, star)
  const suffix = pattern.slice(star + 1)
  if (value.length < prefix.length + suffix.length) return undefined
  if (!value.startsWith(prefix) || !value.endsWith(suffix)) return undefined
  return value.slice(prefix.length, value.length - suffix.length)
}

/** Whether a pattern (with any number of `*`) matches the value. */
export const globMatch = (pattern: string, value: string): boolean => {
  if (!pattern.includes("*")) return pattern === value
  const parts = pattern.split("*")
  let at = 0
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]
    if (i === 0) {
      if (!value.startsWith(part)) return false
      at = part.length
    } else if (i === parts.length - 1) {
      return value.length - part.length >= at && value.endsWith(part)
    } else {
      const found = value.indexOf(part, at)
      if (found < 0) return false
      at = found + part.length
    }
  }
  return true
}

/** Reasoning levels in increasing order, for "nearest variant above" selection. */
export const reasoningLevels = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const

/** The variant for a level: exact name, else (when `nearestAbove`) the nearest known level above it, else the highest. */
export const pickVariant = (variants: ReadonlyArray<string>, level: string, nearestAbove: boolean): string | undefined => {
  if (variants.includes(level)) return level
  if (!nearestAbove || variants.length === 0) return undefined
  const rank = (name: string) => reasoningLevels.indexOf(name.toLowerCase() as (typeof reasoningLevels)[number])
  const wanted = rank(level)
  const ranked = variants.filter((v) => rank(v) >= 0).sort((a, b) => rank(a) - rank(b))
  if (ranked.length === 0) return undefined
  if (wanted < 0) return ranked[ranked.length - 1]
  return ranked.find((v) => rank(v) >= wanted) ?? ranked[ranked.length - 1]
}
