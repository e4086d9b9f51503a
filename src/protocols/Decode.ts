import { Effect, Either, ParseResult, Schema } from "effect"
import { Errors, type GatewayError } from "../domain/Errors.js"

/**
 * Decode a request body with its Schema codec. A refusal names the first offending field by its
 * path (`messages.0.content`) in the message and in `param`.
 */
export const decodeBody = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknownEither(schema, { errors: "first", onExcessProperty: "ignore" })
  return (body: unknown): Effect.Effect<A, GatewayError> => {
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      return Effect.fail(Errors.invalidRequest("invalid_request_error", "The request body must be a JSON object"))
    }
    const result = decode(body)
    if (Either.isRight(result)) return Effect.succeed(result.right)
    const issues = ParseResult.ArrayFormatter.formatErrorSync(result.left)
    const issue = issues[0]
    const param = issue === undefined || issue.path.length === 0 ? undefined : issue.path.map(String).join(".")
    const detail = issue === undefined ? "invalid request" : issue._tag === "Missing" ? "is required" : shorten(issue.message)
    return Effect.fail(Errors.invalidRequest("invalid_request_error", param === undefined ? detail : `${param}: ${detail}`, param === undefined ? undefined : { param }))
  }
}

/** Schema messages can quote the whole value: keep them short and single-line. */
const shorten = (message: string) => {
  const line = message.replace(/\s+/g, " ").trim()
  return line.length > 300 ? `${line.slice(0, 297)}...` : line
}
