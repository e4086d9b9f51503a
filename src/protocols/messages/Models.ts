import { Either } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import type { ModelEntry } from "../../services/routing/Catalog.js"

/**
 * `GET /v1/models` in the Messages shape (a version header is present): pages by `limit`
 * (default 20, 1 to 1000), `after_id` or `before_id`; `has_more` says whether the page's
 * direction has models left. An unknown cursor, both cursors, or a bad limit is a 400.
 */
export const messagesModelPage = (entries: ReadonlyArray<ModelEntry>, query: URLSearchParams): Either.Either<unknown, GatewayError> => {
  const refuse = (param: string, why: string) => Either.left(Errors.invalidRequest("invalid_request_error", `${param}: ${why}`, { param }))
  const limitText = query.get("limit")
  const limit = limitText === null ? 20 : Number(limitText)
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) return refuse("limit", "must be an integer from 1 to 1000")
  const after = query.get("after_id")
  const before = query.get("before_id")
  if (after !== null && before !== null) return refuse("before_id", "after_id and before_id cannot be used together")
  const ids = entries.map((e) => e.id)
  let start = 0
  let end = Math.min(limit, ids.length)
  let hasMore = end < ids.length
  if (after !== null) {
    const at = ids.indexOf(after)
    if (at < 0) return refuse("after_id", `no model ${after}`)
    start = at + 1
    end = Math.min(start + limit, ids.length)
    hasMore = end < ids.length
  } else if (before !== null) {
    const at = ids.indexOf(before)
    if (at < 0) return refuse("before_id", `no model ${before}`)
    end = at
    start = Math.max(0, end - limit)
    hasMore = start > 0
  }
  const data = entries.slice(start, end).map((e) => ({ type: "model", id: e.id, display_name: e.displayName, created_at: "1970-01-01T00:00:00Z" }))
  return Either.right({ data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: hasMore })
}
