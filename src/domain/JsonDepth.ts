/**
 * How deep a parsed JSON value nests. `JSON.parse` reads any depth, but `JSON.stringify`, Schema's
 * error formatter and every recursive translation overflow the stack somewhere past a few thousand
 * levels, so bodies (and model output) nesting deeper than {@link MAX_JSON_DEPTH} are refused where
 * they come in. Neither walk can overflow the stack itself.
 */

/** Levels of arrays and objects a request body may nest; real requests (tool schemas included) stay far below. */
export const MAX_JSON_DEPTH = 128

/**
 * Whether `value` nests more than `max` levels of arrays and objects. Recursive, but never deeper
 * than `max` + 1 frames: it stops where the limit is passed. No allocation (it runs on every
 * request body and every upstream frame).
 */
export const nestsDeeperThan = (value: unknown, max: number = MAX_JSON_DEPTH): boolean => deeper(value, max)

const deeper = (value: unknown, levelsLeft: number): boolean => {
  if (typeof value !== "object" || value === null) return false
  if (levelsLeft === 0) return true
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (deeper(value[i], levelsLeft - 1)) return true
    return false
  }
  const record = value as Record<string, unknown>
  for (const key in record) if (deeper(record[key], levelsLeft - 1)) return true
  return false
}

/**
 * The path of the first value found past `max` levels, cut to its first `keep` steps (the full path
 * of a 10,000-deep value is 10,000 steps long), or undefined when `value` is within the limit.
 */
export const tooDeepPath = (value: unknown, max: number = MAX_JSON_DEPTH, keep = 8): ReadonlyArray<string> | undefined => {
  if (!nestsDeeperThan(value, max)) return undefined
  type Node = { readonly value: unknown; readonly key: string; readonly depth: number; readonly parent: Node | undefined }
  const stack: Array<Node> = [{ value, key: "", depth: 1, parent: undefined }]
  while (stack.length > 0) {
    const node = stack.pop()!
    if (node.depth > max) {
      const path: Array<string> = []
      for (let n: Node | undefined = node; n?.parent !== undefined; n = n.parent) path.push(n.key)
      return path.reverse().slice(0, keep)
    }
    const entries = Object.entries(node.value as object)
    for (let i = entries.length - 1; i >= 0; i--) {
      const child = entries[i][1]
      if (typeof child === "object" && child !== null) stack.push({ value: child, key: entries[i][0], depth: node.depth + 1, parent: node })
    }
  }
  return undefined
}

/**
 * `JSON.parse` for text that came from outside (a client's tool arguments, an upstream's answer):
 * a value nesting past {@link MAX_JSON_DEPTH} throws like text that is not JSON, so callers treat it
 * as such instead of overflowing the stack when they serialize it again.
 */
export const parseJsonText = (text: string): unknown => {
  const value = JSON.parse(text) as unknown
  // every level takes two characters at least: short texts cannot nest too deep
  if (text.length > 2 * MAX_JSON_DEPTH && nestsDeeperThan(value)) throw new SyntaxError(`JSON nests deeper than ${MAX_JSON_DEPTH} levels`)
  return value
}
