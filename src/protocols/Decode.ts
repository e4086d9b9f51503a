import { Effect, Either, ParseResult, Schema } from "effect"
import { Errors, type GatewayError } from "../domain/Errors.js"

/** Schema messages can quote the whole value: keep them short and single-line. */
const shorten = (message: string) => {
  const line = message.replace(/\s+/g, " ").trim()
  return line.length > 300 ? `${line.slice(0, 297)}...` : line
}

/**
 * Decode a value found at `at` (a field path such as `input.3`, or "" for a whole body). A refusal
 * names the first offending field by its full path in the message and in `param`.
 */
export const decodeAt = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknownEither(schema, { errors: "first", onExcessProperty: "ignore" })
  return (value: unknown, at: string): Either.Either<A, GatewayError> => {
    const result = decode(value)
    if (Either.isRight(result)) return Either.right(result.right)
    const issue = ParseResult.ArrayFormatter.formatErrorSync(result.left)[0]
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
