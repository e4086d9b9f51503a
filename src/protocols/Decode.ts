import { Effect, Either, ParseResult, Schema } from "effect"
import { Errors, type GatewayError } from "../domain/Errors.js"

/** Schema messages can quote the whole value: keep them short and single-line. */
const shorten = (message: string) => {
  const line = message.replace(/\s+/g, " ").trim()
  return line.length > 300 ? `${line.slice(0, 297)}...` : line
}

/** The path of the first object String() cannot convert (an own `toString` that is not a function). */
const unconvertiblePath = (value: unknown): Array<string> | undefined => {
  type Node = { readonly value: unknown; readonly key: string; readonly parent: Node | undefined }
  const stack: Array<Node> = [{ value, key: "", parent: undefined }]
  while (stack.length > 0) {
    const node = stack.pop()!
    if (typeof node.value !== "object" || node.value === null) continue
    if (!Array.isArray(node.value)) {
      try {
        String(node.value)
      } catch {
        const path: Array<string> = []
        for (let n: Node | undefined = node; n?.parent !== undefined; n = n.parent) path.unshift(n.key)
        return path
      }
    }
    const entries = Object.entries(node.value)
    for (let i = entries.length - 1; i >= 0; i--) stack.push({ value: entries[i][1], key: entries[i][0], parent: node })
  }
  return undefined
}

/** The path of the first issue, found without printing the offending value. */
const firstPath = (issue: ParseResult.ParseIssue): Array<PropertyKey> => {
  switch (issue._tag) {
    case "Pointer":
      return [...(Array.isArray(issue.path) ? issue.path : [issue.path as PropertyKey]), ...firstPath(issue.issue)]
    case "Composite": {
      const first = Array.isArray(issue.issues) ? issue.issues[0] : (issue.issues as ParseResult.ParseIssue)
      return first === undefined ? [] : firstPath(first)
    }
    case "Refinement":
    case "Transformation":
      return firstPath(issue.issue)
    default:
      return []
  }
}

/**
 * The first issue as the formatter words it; a value nested too deep for the formatter to print
 * (it quotes the actual value and overflows the stack) keeps its path with a plain message.
 */
const formatFirst = (error: ParseResult.ParseError): { readonly _tag: string; readonly path: ReadonlyArray<PropertyKey>; readonly message: string } | undefined => {
  try {
    return ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  } catch {
    return { _tag: "Type", path: firstPath(error.issue), message: "invalid value (nested too deeply to show)" }
  }
}

/**
 * Decode a value found at `at` (a field path such as `input.3`, or "" for a whole body). A refusal
 * names the first offending field by its full path in the message and in `param`.
 */
export const decodeAt = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknownEither(schema, { errors: "first", onExcessProperty: "ignore" })
  return (value: unknown, at: string): Either.Either<A, GatewayError> => {
    let result: Either.Either<A, ParseResult.ParseError>
    try {
      result = decode(value)
    } catch {
      // the decoder's union lookup converts tag values with String(): an object with its own
      // `toString` field throws there; refuse it as the client's invalid value
      const path = [...(at === "" ? [] : [at]), ...(unconvertiblePath(value) ?? [])].join(".")
      return Either.left(Errors.invalidRequest("invalid_request_error", `${path === "" ? "body" : path}: invalid value`, path === "" ? undefined : { param: path }))
    }
    if (Either.isRight(result)) return Either.right(result.right)
    const issue = formatFirst(result.left)
    const path = [...(at === "" ? [] : [at]), ...(issue?.path ?? []).map(String)].join(".")
    const detail = issue === undefined ? "invalid value" : issue._tag === "Missing" ? "is required" : shorten(issue.message)
    return Either.left(Errors.invalidRequest("invalid_request_error", path === "" ? detail : `${path}: ${detail}`, path === "" ? undefined : { param: path }))
  }
}

/** Decode a request body, which must be a JSON object, with its Schema codec. */
export const decodeBody = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = decodeAt(schema)
  return (body: unknown): Effect.Effect<A, GatewayError> => {
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      return Effect.fail(Errors.invalidRequest("invalid_request_error", "The request body must be a JSON object"))
    }
    return decode(body, "")
  }
}
