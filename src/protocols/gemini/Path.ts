/**
 * Gemini-style model paths (spec 4.3): `/v1beta/models/{model}:{method}` and
 * `/v1beta/models/{model}`. `{model}` is percent-decoded and may be an alias, `<provider>/<model>`
 * with a literal `/`, a fully encoded id with a variant (`%23` for `#`), or an id holding a colon
 * (only the text after the last `:` is the method), with an optional leading `models/` dropped.
 */

export const modelMethods = ["generateContent", "streamGenerateContent", "countTokens"] as const
export type ModelMethod = (typeof modelMethods)[number]

const prefix = "/v1beta/models/"

const decode = (raw: string): string | undefined => {
  try {
    return decodeURIComponent(raw)
  } catch {
    return undefined
  }
}

const dropModelsPrefix = (id: string) => (id.startsWith("models/") ? id.slice("models/".length) : id)

/** A path after `/v1beta/models/` with a method: the model id and the method as written. */
export const parseModelAction = (path: string): { readonly model: string; readonly method: string } | undefined => {
  if (!path.startsWith(prefix)) return undefined
  const decoded = decode(path.slice(prefix.length))
  if (decoded === undefined) return undefined
  const colon = decoded.lastIndexOf(":")
  if (colon <= 0 || colon === decoded.length - 1) return undefined
  const model = dropModelsPrefix(decoded.slice(0, colon))
  return model === "" ? undefined : { model, method: decoded.slice(colon + 1) }
}

/** A path after `/v1beta/models/` naming one model (GET), without a method. */
export const parseModelName = (path: string): string | undefined => {
  if (!path.startsWith(prefix)) return undefined
  const decoded = decode(path.slice(prefix.length))
  if (decoded === undefined) return undefined
  const model = dropModelsPrefix(decoded)
  return model === "" ? undefined : model
}

export const isModelMethod = (method: string): method is ModelMethod => (modelMethods as ReadonlyArray<string>).includes(method)
