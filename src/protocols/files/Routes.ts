import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Effect, Either, Option, Stream } from "effect"
import { Settings } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { fileNotFound } from "../FileParts.js"
import { Reply, type RequestContext, type Route } from "../../http/Route.js"
import { streamResponse } from "../../http/Writer.js"
import { FileStore, type FileRecord } from "../../services/files/FileStore.js"
import { chatFile, chatPage, geminiFile, geminiPage, messagesFile, messagesPage } from "./Shapes.js"
import { bodyRules, receiveForm, saveUpload } from "./Upload.js"
import { makeResumable } from "./Resumable.js"

/**
 * The Files APIs (spec 4.4): `/v1/files` in the chat/Responses shape or, with a Messages version
 * header, the Messages shape; `/v1beta/files` and `/upload/v1beta/files` in the Gemini shape.
 * Every route: authentication (the edge), then the app's `endpoints.files` permission, then a
 * lookup in the caller's own app only.
 */

const chatPurposes = ["user_data", "assistants", "vision", "evals"]

const FILE_ID = /^file-[0-9a-f]{32}$/

/** `Content-Disposition: attachment` with the name in both the plain and the RFC 5987 form. */
const attachment = (filename: string) => {
  const plain = filename.replace(/[^\x20-\x7e]|["\\]/g, "_")
  // RFC 5987 attr-char has no `'`, `(`, `)` or `*`, which encodeURIComponent leaves as they are
  const encoded = encodeURIComponent(filename).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  return `attachment; filename="${plain}"; filename*=UTF-8''${encoded}`
}

/**
 * A download: the status and headers with the first piece (a failure before it is answered in the
 * route's envelope), then each piece as the client takes it; a failure after the first piece can
 * only cut the connection. The pieces are read in the request's scope, so the platform's writer
 * pulls them as the client takes them, and a client gone stops the reading.
 */
const sendBody = (ctx: RequestContext, headers: Record<string, string>, body: Stream.Stream<Uint8Array, GatewayError>) =>
  Effect.gen(function* () {
    const pull = yield* Stream.toPull(body)
    const first = yield* Effect.either(pull)
    if (Either.isLeft(first)) {
      if (Option.isSome(first.left)) return yield* Effect.fail(first.left.value)
      return streamResponse(200, headers, Stream.empty)
    }
    const cut = Effect.sync(() => NodeHttpServerRequest.toServerResponse(ctx.request).destroy())
    const rest = Stream.catchAll(Stream.repeatEffectChunkOption(pull), () => Stream.execute(cut))
    return streamResponse(200, headers, Stream.concat(Stream.fromChunk(first.right), rest))
  })

export const filesRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const store = yield* FileStore
  const resumable = yield* makeResumable

  const gate = (ctx: RequestContext) =>
    ctx.app.filesEnabled ? Effect.void : Effect.fail(Errors.permission("files_forbidden", "The Files API is not enabled for this key's app"))

  /** A live file of the caller's app, or the family's not-found. */
  const owned = (ctx: RequestContext, id: string) =>
    Effect.flatMap(FILE_ID.test(id) ? store.get(ctx.principal.app, id) : Effect.succeed(Option.none<FileRecord>()), (found) =>
      Option.match(found, { onNone: () => Effect.fail(fileNotFound(ctx.family, id)), onSome: Effect.succeed })
    )

  const upload = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx)
      const record = yield* saveUpload(store, ctx, bodyRules(ctx, config.limits), receiveForm, (form) => {
        // the Messages shape has no purpose; its uploads are user data
        const purpose = ctx.family === "messages" ? "user_data" : form.fields.purpose
        if (purpose === undefined || !chatPurposes.includes(purpose)) {
          return Effect.fail(Errors.invalidRequest("invalid_request_error", `purpose: must be one of ${chatPurposes.join(", ")}`, { param: "purpose" }))
        }
        return Effect.succeed({ filename: form.filename, purpose, maxAgeDays: ctx.app.maxAgeDays })
      })
      return Reply.json(ctx.family === "messages" ? messagesFile(record) : chatFile(record))
    })

  const list = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx)
      const files = yield* store.list(ctx.principal.app)
      const page = ctx.family === "messages" ? messagesPage(files, ctx.query) : ctx.family === "gemini" ? geminiPage(files, ctx.query, ctx.origin) : chatPage(files, ctx.query)
      return Reply.json(yield* Either.match(page, { onLeft: Effect.fail, onRight: Effect.succeed }))
    })

  const idOf = (ctx: RequestContext) => (ctx.family === "gemini" ? `file-${ctx.params.name}` : ctx.params.id)

  const retrieve = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx)
      const file = yield* owned(ctx, idOf(ctx))
      return Reply.json(ctx.family === "messages" ? messagesFile(file) : ctx.family === "gemini" ? geminiFile(file, ctx.origin) : chatFile(file))
    })

  const remove = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx)
      const id = idOf(ctx)
      const removed = FILE_ID.test(id) && (yield* store.remove(ctx.principal.app, id))
      if (!removed) return yield* fileNotFound(ctx.family, id)
      if (ctx.family === "messages") return Reply.json({ id, type: "file_deleted" })
      if (ctx.family === "gemini") return Reply.json({})
      return Reply.json({ id, object: "file", deleted: true })
    })

  /** The bytes, as an attachment of the stored type that a browser will neither sniff nor run. */
  const content = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* gate(ctx)
      const file = yield* owned(ctx, ctx.params.id)
      const headers = {
        "content-type": file.mimeType.startsWith("text/") || file.mimeType === "application/json" ? `${file.mimeType}; charset=utf-8` : file.mimeType,
        "content-length": String(file.bytes),
        "content-disposition": attachment(file.filename),
        "x-content-type-options": "nosniff",
        "content-security-policy": "sandbox; default-src 'none'"
      }
      if (ctx.method === "HEAD") return HttpServerResponse.empty({ status: 200, headers })
      return yield* sendBody(ctx, headers, store.content(file))
    })

  const byId = (suffix: string) => (path: string) => {
    const match = new RegExp(`^/v1/files/([^/]+)${suffix}$`).exec(path)
    return match === null ? undefined : { id: decodeURIComponent(match[1]) }
  }
  const geminiName = (path: string) => {
    const match = /^\/v1beta\/files\/([^/:]+)$/.exec(path)
    return match === null ? undefined : { name: match[1] }
  }

  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: "/v1/files", auth: "key", handler: upload, label: "files.upload" },
    { method: "GET", path: "/v1/files", auth: "key", handler: list, label: "files.list" },
    { method: "GET", path: byId("/content"), template: "/v1/files/{id}/content", auth: "key", handler: content, label: "files.content" },
    { method: "GET", path: byId(""), template: "/v1/files/{id}", auth: "key", handler: retrieve, label: "files.retrieve" },
    { method: "DELETE", path: byId(""), template: "/v1/files/{id}", auth: "key", handler: remove, label: "files.delete" },
    { method: "GET", path: "/v1beta/files", auth: "key", handler: list, label: "gemini.files.list" },
    { method: "GET", path: geminiName, template: "/v1beta/files/{name}", auth: "key", handler: retrieve, label: "gemini.files.get" },
    { method: "DELETE", path: geminiName, template: "/v1beta/files/{name}", auth: "key", handler: remove, label: "gemini.files.delete" },
    { method: "POST", path: "/upload/v1beta/files", auth: "upload", handler: resumable.handle, label: "gemini.files.upload" }
  ]
  return routes
})
