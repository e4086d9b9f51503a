import { Clock, Effect, Option, Runtime, Schedule, Schema } from "effect"
import { Settings } from "../../Config.js"
import { Errors, type AnyGatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import { Reply, type RequestContext } from "../../http/Route.js"
import { Catalog } from "../../services/Catalog.js"
import { FileStore, type Stage } from "../../services/FileStore.js"
import { KeyStore } from "../../services/KeyStore.js"
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
 * app's id). Unfinished uploads live in this process only: 4 per app, each 10 minutes; they are
 * dropped by a timer, by any request to the upload route, and by a restart (the file store removes
 * their partial bytes at start).
 */

const MAX_UNFINISHED = 4
const UPLOAD_TTL_MS = 10 * 60 * 1000
const UPLOAD_ID = /^[0-9a-f]{32}$/

interface Upload {
  readonly id: string
  readonly app: string
  readonly keyId: string
  readonly expiresAt: number
  readonly displayName?: string
  readonly filename: string
  readonly stage: Stage
  /** a chunk is being written: the next one must wait for its offset */
  busy: boolean
}

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
  const uploads = new Map<string, Upload>()

  const drop = (upload: Upload) =>
    Effect.suspend(() => {
      uploads.delete(upload.id)
      return upload.stage.discard
    })

  /** Drop every upload past its 10 minutes. */
  const expire = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    for (const upload of [...uploads.values()]) if (upload.expiresAt <= now && !upload.busy) yield* drop(upload)
  })
  yield* Effect.forkScoped(Effect.repeat(expire, Schedule.spaced("1 minute")))
  // an upload lives only while its starting key does (revocation calls back outside any fiber)
  const runtime = yield* Effect.runtime<never>()
  keys.onRevoke((keyId) => {
    for (const upload of [...uploads.values()]) if (upload.keyId === keyId) Runtime.runFork(runtime)(drop(upload))
  })
  yield* Effect.addFinalizer(() => Effect.forEach([...uploads.values()], drop, { discard: true }))

  const gate = (app: string) =>
    catalog.app(app).filesEnabled ? Effect.void : Effect.fail(Errors.permission("files_forbidden", "The Files API is not enabled for this key's app"))

  const start = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const app = ctx.principal.app
      yield* gate(app)
      const unfinished = [...uploads.values()].filter((u) => u.app === app).length
      if (unfinished >= MAX_UNFINISHED) {
        return yield* Errors.rateLimited("too_many_uploads", `This app already has ${MAX_UNFINISHED} unfinished uploads; finish or wait for them`, { retryAfter: 60 })
      }
      yield* store.checkRoom(app)
      const raw = ctx.headers["content-length"] === "0" || ctx.headers["content-length"] === undefined ? {} : yield* ctx.json
      const body = yield* decodeStart(raw, "")
      const size = Number(uploadHeader(ctx, "header-content-length") ?? "")
      if (Number.isFinite(size) && size > Math.min(ctx.app.maxBodyBytes, 32 * 1024 * 1024)) {
        return yield* Errors.payloadTooLarge("file_too_large", `The file is larger than ${Math.min(ctx.app.maxBodyBytes, 32 * 1024 * 1024)} bytes, the most one file may hold`)
      }
      const declaredType = uploadHeader(ctx, "header-content-type") ?? body.file?.mimeType ?? body.file?.mime_type ?? undefined
      const displayName = body.file?.displayName ?? body.file?.display_name ?? undefined
      const filename = displayName ?? "upload"
      const id = randomHex(16)
      const now = yield* Clock.currentTimeMillis
      // opened and registered in one step, so a request ended meanwhile cannot lose the open file
      yield* store.stage({ filename, ...(declaredType ? { declaredType } : {}), maxBytes: ctx.app.maxBodyBytes }).pipe(
        Effect.tap((stage) =>
          Effect.sync(() => {
            uploads.set(id, { id, app, keyId: ctx.principal.keyId, expiresAt: now + UPLOAD_TTL_MS, ...(displayName ? { displayName } : {}), filename, stage, busy: false })
          })
        ),
        Effect.uninterruptible
      )
      const url = `${ctx.origin}/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`
      return Reply.text("", "text/plain", { headers: { ...statusHeaders("active", { url, "chunk-granularity": String(8 * 1024 * 1024) }) } })
    })

  const chunk = (ctx: RequestContext, id: string) =>
    Effect.gen(function* () {
      const found = UPLOAD_ID.test(id) ? Option.fromNullable(uploads.get(id)) : Option.none<Upload>()
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
      if (command.includes("query")) return Reply.text("", "text/plain", { headers: statusHeaders("active", { "size-received": String(upload.stage.size()) }) })
      if (upload.busy) return yield* Errors.rateLimited("file_saves_busy", "Another chunk of this upload is being written", { retryAfter: 1 })
      const offsetText = uploadHeader(ctx, "offset")
      const offset = offsetText === undefined ? upload.stage.size() : Number(offsetText)
      if (!Number.isSafeInteger(offset) || offset !== upload.stage.size()) {
        return yield* refuse("X-Goog-Upload-Offset", `must be ${upload.stage.size()}, the bytes received so far`)
      }
      const app = catalog.app(upload.app)
      const rules = { ...bodyRules(ctx, config.limits), maxBytes: app.maxBodyBytes }
      const length = yield* declaredLength(ctx.incoming, rules.maxBytes)
      upload.busy = true
      const written = yield* Effect.scoped(
        Effect.gen(function* () {
          yield* store.admit(upload.app, length ?? 0)
          if (command.includes("upload") && length !== 0) yield* upload.stage.write(bodyPieces(ctx.incoming, rules))
          if (!command.includes("finalize")) return Option.none()
          const staged = yield* upload.stage.finish
          uploads.delete(upload.id)
          return Option.some(yield* store.commit(upload.app, staged, { filename: upload.filename, purpose: "user_data", ...(upload.displayName ? { displayName: upload.displayName } : {}), maxAgeDays: app.maxAgeDays }))
        })
      ).pipe(
        Effect.ensuring(Effect.sync(() => void (upload.busy = false))),
        // a failed chunk ends the upload: its bytes can no longer be trusted to be whole
        Effect.tapError(() => drop(upload))
      )
      if (Option.isNone(written)) return Reply.text("", "text/plain", { headers: statusHeaders("active", { "size-received": String(upload.stage.size()) }) })
      return Reply.json({ file: geminiFile(written.value, ctx.origin) }, { headers: statusHeaders("final") })
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
