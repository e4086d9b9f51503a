import { Either } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import type { FileRecord } from "../../services/files/FileStore.js"

/** The three shapes of a file object (spec 2.4) and their list pages (spec 4.4). */

const seconds = (ms: number) => Math.floor(ms / 1000)
const iso = (ms: number) => new Date(ms).toISOString()

/** `file-<hex>` → `<hex>`, the Gemini-style name's tail. */
export const hexOf = (id: string) => id.slice("file-".length)

export const chatFile = (file: FileRecord) => ({
  id: file.id,
  object: "file",
  bytes: file.bytes,
  created_at: seconds(file.createdAt),
  expires_at: seconds(file.expiresAt),
  filename: file.filename,
  purpose: file.purpose,
  status: "processed"
})

export const messagesFile = (file: FileRecord) => ({
  id: file.id,
  type: "file",
  filename: file.filename,
  mime_type: file.mimeType,
  size_bytes: file.bytes,
  created_at: iso(file.createdAt),
  downloadable: true,
  expires_at: iso(file.expiresAt)
})

export const geminiFile = (file: FileRecord, origin: string) => ({
  name: `files/${hexOf(file.id)}`,
  displayName: file.displayName ?? file.filename,
  mimeType: file.mimeType,
  sizeBytes: String(file.bytes),
  createTime: iso(file.createdAt),
  updateTime: iso(file.createdAt),
  expirationTime: iso(file.expiresAt),
  uri: `${origin}/v1beta/files/${hexOf(file.id)}`,
  state: "ACTIVE",
  source: "UPLOADED"
})

type Page<A> = Either.Either<A, GatewayError>

const intParam = (query: URLSearchParams, name: string, min: number, max: number, fallback: number, refuse: (param: string, why: string) => GatewayError): Page<number> => {
  const text = query.get(name)
  if (text === null || text === "") return Either.right(fallback)
  const value = Number(text)
  if (!Number.isInteger(value) || value < min || value > max) return Either.left(refuse(name, `must be an integer from ${min} to ${max}`))
  return Either.right(value)
}

const openAiRefusal = (param: string, why: string) => Errors.invalidRequest("invalid_request_error", `${param}: ${why}`, { param })

/** `GET /v1/files` (chat-style): purpose, limit 1..10000 (10000), after, order asc|desc (desc). */
export const chatPage = (files: ReadonlyArray<FileRecord>, query: URLSearchParams): Page<unknown> => {
  const limit = intParam(query, "limit", 1, 10000, 10000, openAiRefusal)
  if (Either.isLeft(limit)) return limit
  const order = query.get("order") ?? "desc"
  if (order !== "asc" && order !== "desc") return Either.left(openAiRefusal("order", "must be asc or desc"))
  const purpose = query.get("purpose")
  let list = purpose === null || purpose === "" ? [...files] : files.filter((f) => f.purpose === purpose)
  if (order === "desc") list.reverse()
  const after = query.get("after")
  if (after !== null && after !== "") {
    const at = list.findIndex((f) => f.id === after)
    if (at < 0) return Either.left(openAiRefusal("after", `no file ${after} in this listing`))
    list = list.slice(at + 1)
  }
  const data = list.slice(0, limit.right).map(chatFile)
  return Either.right({ object: "list", data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: list.length > data.length })
}

const messagesRefusal = (param: string, why: string) => Errors.invalidRequest("invalid_request_error", `${param}: ${why}`, { param })

/**
 * `GET /v1/files` (Messages-style): newest first; limit 1..1000 (20); `page` (an earlier
 * `next_page`) or `after_id` continue after an id, `before_id` gives the page before one; `ids`
 * (comma separated or repeated, up to 100) narrows to those files.
 */
export const messagesPage = (files: ReadonlyArray<FileRecord>, query: URLSearchParams): Page<unknown> => {
  const limit = intParam(query, "limit", 1, 1000, 20, messagesRefusal)
  if (Either.isLeft(limit)) return limit
  let list = [...files].reverse()
  // `ids=a,b`, repeated `ids=a&ids=b`, or the SDK's `ids[]=a&ids[]=b`
  const ids = [...query.getAll("ids"), ...query.getAll("ids[]")].flatMap((v) => v.split(",")).map((v) => v.trim()).filter((v) => v !== "")
  if (ids.length > 100) return Either.left(messagesRefusal("ids", "at most 100 ids"))
  if (ids.length > 0) list = list.filter((f) => ids.includes(f.id))
  const after = query.get("page") ?? query.get("after_id")
  const before = query.get("before_id")
  if (after !== null && before !== null) return Either.left(messagesRefusal("before_id", "cannot be combined with after_id or page"))
  let start = 0
  let end = Math.min(limit.right, list.length)
  let hasMore = end < list.length
  if (after !== null) {
    const at = list.findIndex((f) => f.id === after)
    if (at < 0) return Either.left(messagesRefusal(query.get("page") !== null ? "page" : "after_id", `no file ${after} in this listing`))
    start = at + 1
    end = Math.min(start + limit.right, list.length)
    hasMore = end < list.length
  } else if (before !== null) {
    const at = list.findIndex((f) => f.id === before)
    if (at < 0) return Either.left(messagesRefusal("before_id", `no file ${before} in this listing`))
    end = at
    start = Math.max(0, end - limit.right)
    hasMore = start > 0
  }
  const data = list.slice(start, end).map(messagesFile)
  const lastId = data[data.length - 1]?.id ?? null
  return Either.right({ data, first_id: data[0]?.id ?? null, last_id: lastId, has_more: hasMore, next_page: hasMore && before === null ? lastId : null })
}

const geminiRefusal = (param: string, why: string) => Errors.invalidRequest("invalid_argument", `${param}: ${why}`, { param })

/** `GET /v1beta/files`: oldest first; pageSize 1..100 (10); pageToken from an earlier nextPageToken. */
export const geminiPage = (files: ReadonlyArray<FileRecord>, query: URLSearchParams, origin: string): Page<unknown> => {
  const size = intParam(query, "pageSize", 1, 100, 10, geminiRefusal)
  if (Either.isLeft(size)) return size
  const token = query.get("pageToken")
  let start = 0
  if (token !== null && token !== "") {
    const at = files.findIndex((f) => hexOf(f.id) === token)
    if (at < 0) return Either.left(geminiRefusal("pageToken", "is not a token from an earlier page"))
    start = at + 1
  }
  const page = files.slice(start, start + size.right)
  const more = start + page.length < files.length
  return Either.right({ files: page.map((f) => geminiFile(f, origin)), ...(more ? { nextPageToken: hexOf(page[page.length - 1].id) } : {}) })
}
