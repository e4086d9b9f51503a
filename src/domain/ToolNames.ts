import { createHash } from "node:crypto"

const maxNameLength = 64

/** `<namespace>__<name>`, shortened past 64 characters to 55 + `_` + 8 hex of a hash of both. */
export const flattenName = (namespace: string, name: string): string => {
  const flat = `${namespace}__${name}`
  if (flat.length <= maxNameLength) return flat
  const hash = createHash("sha256").update(namespace).update("\u0000").update(name).digest("hex").slice(0, 8)
  return `${flat.slice(0, 55)}_${hash}`
}
