import { Effect, Option, Runtime, Schedule, Schema } from "effect"
import { Settings } from "../../Config.js"
import { Errors, type AnyGatewayError } from "../../domain/Errors.js"
import { Reply, type RequestContext } from "../../http/Route.js"
import { Catalog } from "../../services/routing/Catalog.js"
import { type FileRecord, FileStore, type Upload } from "../../services/files/FileStore.js"
import { KeyStore } from "../../services/keys/KeyStore.js"
import { Log } from "../../services/ops/Log.js"
import { decodeAt } from "../Decode.js"
import { geminiFile } from "./Shapes.js"
import { bodyPieces, bodyRules, declaredLength, receiveRelated, saveUpload } from "./Upload.js"

/**
 * Gemini-style uploads on `POST /upload/v1beta/files` (spec 4.4): the resumable protocol (a
 * `start` answered with an upload URL, then chunks at the right offset, the last one
 * `finalize`), and `uploadType=multipart` (JSON metadata, then the file, as multipart/related).
 *
 * The upload URL is the credential of its chunks: a chunk with no key runs as the app that
 * started the upload; an unknown or dropped id is 401 without a key, 404 with one (as is another
 * app's id). Unfinished uploads are the file store's (in this process on SQLite, in the database
 * on PostgreSQL, where any replica takes any chunk): 4 per app, each 10 minutes; they are dropped
 * by a timer, by any request to the upload route, and when the key that started them is revoked.
 * The upload URL names the origin the caller reached (the public one behind a trusted proxy).
 */

const UPLOAD_ID = /^[0-9a-f]{32}$/

const StartBody = Schema.Struct({
  file: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        displayName: Schema.optional(Schema.NullOr(Schema.String)),
        display_name: Schema.optional(Schema.NullOr(Schema.String)),
        mimeType: Schema.optional(Schema.NullOr(Schema.String)),
        mime_type: Schema.optional(Schema.NullOr(Schema.String)),
        name: Schema.optional(Schema.NullOr(Schema.String))
      })
    )
  )
})
const decodeStart = decodeAt(StartBody)

/** A header in the neutral spelling or the one real clients send (`x-goog-upload-*`). */
const uploadHeader = (ctx: RequestContext, name: string): string | undefined => ctx.headers[`x-genai-upload-${name}`] ?? ctx.headers[`x-goog-upload-${name}`]

/** Upload status headers in both spellings. */
const statusHeaders = (status: "active" | "final", extra: Record<string, string> = {}) => {
  const out: Record<string, string> = { "x-goog-upload-status": status, "x-genai-upload-status": status }
  for (const [name, value] of Object.entries(extra)) {
    out[`x-goog-upload-${name}`] = value
    out[`x-genai-upload-${name}`] = value
  }
  return out
}

const refuse = (param: string, why: string) => Errors.invalidRequest("invalid_argument", `${param}: ${why}`, { param })

export const makeResumable = Effect.gen(function* () {
  const config = yield* Settings
  const catalog = yield* Catalog
  const store = yield* FileStore
  const keys = yield* KeyStore
  const log = yield* Log
  const uploads = store.uploads

  const expire = uploads.expire
  yield* Effect.forkScoped(
    Effect.repeat(
      Effect.catchAll(expire, () => Effect.sync(() => log.error("files.upload_expiry_failed", { reason: "database" }))),
      Schedule.spaced("1 minute")
    )
  )
  // an upload lives only while its starting key does (revocation calls back outside any fiber)
  const runtime = yield* Effect.runtime<never>()
  keys.onRevoke((keyId) => {
    Runtime.runFork(runtime)(Effect.catchAll(uploads.dropKey(keyId), () => Effect.sync(() => log.error("files.upload_drop_failed", { reason: "database" }))))
  })

  const gate = (app: string) =>
    catalog.app(app).filesEnabled ? Effect.void : Effect.fail(Errors.permission("files_forbidden", "The Files API is not enabled for this key's app"))

  const start = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const app = ctx.principal.app
      yield* gate(app)
      yield* store.checkRoom(app)
      const raw = ctx.headers["content-length"] === "0" || ctx.headers["content-length"] === undefined ? {} : yield* ctx.json
      const body = yield* decodeStart(raw, "")
      const size = Number(uploadHeader(ctx, "header-content-length") ?? "")
      if (Number.isFinite(size) && size > Math.min(ctx.app.maxBodyBytes, 32 * 1024 * 1024)) {
        return yield* Errors.payloadTooLarge("file_too_large", `The file is larger than ${Math.min(ctx.app.maxBodyBytes, 32 * 1024 * 1024)} bytes, the most one file may hold`)
      }
      const declaredType = uploadHeader(ctx, "header-content-type") ?? body.file?.mimeType ?? body.file?.mime_type ?? undefined
      const displayName = body.file?.displayName ?? body.file?.display_name ?? undefined
      const upload = yield* uploads.start({
        app,
        keyId: ctx.principal.keyId,
        filename: displayName ?? "upload",
        ...(displayName ? { displayName } : {}),
        ...(declaredType ? { declaredType } : {}),
        maxBytes: ctx.app.maxBodyBytes
      })
      const url = `${ctx.origin}/upload/v1beta/files?upload_id=${upload.id}&upload_protocol=resumable`
      return Reply.text("", "text/plain", { headers: { ...statusHeaders("active", { url, "chunk-granularity": String(8 * 1024 * 1024) }) } })
    })

  const chunk = (ctx: RequestContext, id: string) =>
    Effect.gen(function* () {
      const found = UPLOAD_ID.test(id) ? yield* uploads.find(id) : Option.none<Upload>()
      const missing = () =>
        ctx.keyPresented
          ? Errors.notFound("not_found", `No upload ${id} is in progress`)
          : Errors.authentication("invalid_api_key", "The upload URL names no upload in progress and no key was sent")
      if (Option.isNone(found)) return yield* missing()
      const upload = found.value
      // with a key the usual check applies: another app's upload is not there
      if (ctx.keyPresented && upload.app !== ctx.principal.app) return yield* missing()
      yield* gate(upload.app)
      const command = (uploadHeader(ctx, "command") ?? "").toLowerCase().split(",").map((c) => c.trim()).filter((c) => c !== "")
      if (command.length === 0 || command.some((c) => c !== "upload" && c !== "finalize" && c !== "query")) {
        return yield* refuse("X-Goog-Upload-Command", "must be upload, finalize, or both")
      }
      if (command.includes("query")) return Reply.text("", "text/plain", { headers: statusHeaders("active", { "size-received": String(upload.size) }) })
      const offsetText = uploadHeader(ctx, "offset")
      const offset = offsetText === undefined ? undefined : Number(offsetText)
      if (offset !== undefined && !Number.isSafeInteger(offset)) return yield* refuse("X-Goog-Upload-Offset", `must be ${upload.size}, the bytes received so far`)
      const app = catalog.app(upload.app)
      const rules = { ...bodyRules(ctx, config.limits), maxBytes: app.maxBodyBytes }
      const length = yield* declaredLength(ctx.incoming, rules.maxBytes)
      const written = yield* Effect.scoped(
        Effect.gen(function* () {
          const writer = yield* uploads.claim(upload, offset, (size) => refuse("X-Goog-Upload-Offset", `must be ${size}, the bytes received so far`))
          yield* store.admit(upload.app, length ?? 0)
          if (command.includes("upload") && length !== 0) yield* writer.write(bodyPieces(ctx.incoming, rules))
          if (!command.includes("finalize")) return { size: writer.size(), file: Option.none<FileRecord>() }
          const staged = yield* writer.finish
          const file = yield* store.commit(upload.app, staged, { filename: upload.filename, purpose: "user_data", ...(upload.displayName ? { displayName: upload.displayName } : {}), maxAgeDays: app.maxAgeDays })
          return { size: writer.size(), file: Option.some(file) }
        })
      )
      if (Option.isNone(written.file)) return Reply.text("", "text/plain", { headers: statusHeaders("active", { "size-received": String(written.size) }) })
      return Reply.json({ file: geminiFile(written.file.value, ctx.origin) }, { headers: statusHeaders("final") })
    })

  /** `uploadType=multipart`: JSON metadata then the file, as multipart/related. */
  const multipart = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx.principal.app)
      const record = yield* saveUpload(store, ctx, bodyRules(ctx, config.limits), receiveRelated, (received) =>
        Effect.map(decodeStart(received.metadata, "metadata"), (metadata) => {
          const displayName = metadata.file?.displayName ?? metadata.file?.display_name ?? undefined
          return { filename: displayName ?? "upload", purpose: "user_data", ...(displayName ? { displayName } : {}), maxAgeDays: ctx.app.maxAgeDays }
        })
      )
      return Reply.json({ file: geminiFile(record, ctx.origin) })
    })

  const handle = (ctx: RequestContext): Effect.Effect<Reply, AnyGatewayError> =>
    Effect.gen(function* () {
      yield* expire
      const id = ctx.query.get("upload_id")
      if (id !== null) return yield* chunk(ctx, id)
      // every other request needs a key (or a keyless gateway)
      if (!ctx.keyPresented && !keys.keyless) return yield* Errors.authentication("invalid_api_key", "Missing API key")
      const uploadType = ctx.query.get("uploadType") ?? ctx.query.get("upload_type")
      if (uploadType === "media") return yield* refuse("uploadType", "media uploads are not supported; use resumable or multipart")
      if (uploadType === "multipart") return yield* multipart(ctx)
      const protocol = (uploadHeader(ctx, "protocol") ?? uploadType ?? "").toLowerCase()
      const command = (uploadHeader(ctx, "command") ?? "").toLowerCase()
      if (protocol === "resumable" && command === "start") return yield* start(ctx)
      return yield* refuse("X-Goog-Upload-Protocol", "start a resumable upload (X-Goog-Upload-Protocol: resumable, X-Goog-Upload-Command: start) or use uploadType=multipart")
    })

  return { handle }
})
