import { Chunk, Effect, Stream } from "effect"
import { Settings } from "../../Config.js"
import { addUsage, emptyUsage, foldEvents, type Answer, type ModelEvent } from "../../domain/Canonical.js"
import { type GatewayError } from "../../domain/Errors.js"
import { Ids } from "../../domain/Ids.js"
import { resolveStructured, withRespondTool } from "../../domain/Structured.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { encodedPull, writePulled, writeStream } from "../../http/Writer.js"
import { Catalog } from "../../services/Catalog.js"
import { ModelRunner } from "../../services/ModelRunner.js"
import { decodeBody } from "../Decode.js"
import { messagesModelPage } from "../messages/Models.js"
import { holdStructured } from "../HeldBack.js"
import { makeFileResolver } from "../FileParts.js"
import { chatFileRefs, decodeChat, decodeCompletion, type DecodedChat } from "./Decode.js"
import * as Encode from "./Encode.js"
import { ChatRequest, CompletionRequest } from "./Schema.js"

const decodeChatBody = decodeBody(ChatRequest)
const decodeCompletionBody = decodeBody(CompletionRequest)

/** Response headers every model answer carries. */
const answerHeaders = (runs: ReadonlyArray<{ readonly sessionId: string; readonly droppedParams: ReadonlyArray<string> }>): Record<string, string> => {
  const headers: Record<string, string> = { "x-gateway-session": runs.map((r) => r.sessionId).join(",") }
  const dropped = [...new Set(runs.flatMap((r) => r.droppedParams))]
  if (dropped.length > 0) headers["x-gateway-dropped-params"] = dropped.join(",")
  return headers
}

/** Apply the structured-output rules to a folded answer. */
const structuredAnswer = (answer: Answer, decoded: DecodedChat): Effect.Effect<{ readonly answer: Answer; readonly fallback: boolean }, GatewayError> => {
  const structured = decoded.request.structured
  if (structured === undefined) return Effect.succeed({ answer, fallback: false })
  const resolved = resolveStructured(answer, structured)
  return resolved._tag === "ok" ? Effect.succeed(resolved.result) : Effect.fail(resolved.error)
}

const makeHandler = (legacy: boolean) =>
  Effect.gen(function* () {
    const config = yield* Settings
    const runner = yield* ModelRunner
    const resolveFiles = yield* makeFileResolver
    return (ctx: RequestContext) =>
      Effect.gen(function* () {
        const body = yield* ctx.json
        const decoded = legacy
          ? yield* decodeCompletionBody(body).pipe(Effect.flatMap((wire) => decodeCompletion(wire, { maxChoices: ctx.app.maxChoices })))
          : yield* decodeChatBody(body).pipe(
              Effect.flatMap((wire) =>
                Effect.flatMap(resolveFiles(ctx.principal.app, chatFileRefs(wire), "openai"), (files) =>
                  decodeChat(wire, { maxChoices: ctx.app.maxChoices, maxTools: config.maxTools }, files)
                )
              )
            )
        const model = (body as { model: string }).model
        const request = withRespondTool(decoded.request)
        const meta: Encode.ChatMeta = {
          id: legacy ? Ids.completion() : Ids.chatCompletion(),
          created: Math.floor(Date.now() / 1000),
          model,
          reasoningOutput: ctx.app.reasoningOutput
        }
        const safetyId = (body as { safety_identifier?: unknown }).safety_identifier
        const caller = callerOf(ctx, request.user ?? (typeof safetyId === "string" ? safetyId : undefined), model)
        const start = runner.start({ caller, model, request, app: ctx.app, deadline: ctx.deadline, resolve: reasoningResolve(decoded) })
        const indexes = Array.from({ length: decoded.n }, (_, i) => i)

        if (!decoded.request.stream) {
          const complete = runner.complete({ caller, model, request, app: ctx.app, deadline: ctx.deadline, resolve: reasoningResolve(decoded) })
          const runs = yield* Effect.forEach(indexes, () => complete, { concurrency: decoded.n > 1 ? "unbounded" : 1 })
          const results: Array<{ readonly answer: Answer; readonly fallback: boolean }> = []
          for (const run of runs) results.push(yield* structuredAnswer(foldEvents(run.events), decoded))
          const answers = results.map((r) => r.answer)
          const usage = answers.reduce((sum, a) => addUsage(sum, a.usage), emptyUsage)
          const headers = answerHeaders(runs)
          if (results.some((r) => r.fallback)) headers["x-gateway-structured-fallback"] = "text"
          const payload = legacy ? Encode.textCompletionBody(meta, answers, usage) : Encode.chatCompletionBody(meta, answers, usage)
          return Reply.json(payload, { headers })
        }

        return yield* Effect.scoped(
          Effect.gen(function* () {
            // one choice runs in this fiber: an unbounded forEach forks two fibers even for one element
            const runs = yield* Effect.forEach(indexes, () => Effect.flatMap(start, (run) => holdStructured(run, decoded.request.structured)), {
              concurrency: decoded.n > 1 ? "unbounded" : 1
            })
            let usage = emptyUsage
            const encoders = runs.map((_, index) => {
              const state = Encode.newChoiceState()
              return (event: ModelEvent) => {
                if (event._tag === "Usage") usage = addUsage(usage, event.usage)
                return legacy ? Encode.encodeTextEvent(meta, index, event) : Encode.encodeChatEvent(meta, index, state, event)
              }
            })
            const end = () => (decoded.includeUsage ? Encode.usageChunk(meta, usage, legacy ? "text_completion" : "chat.completion.chunk") : "") + Encode.doneFrame
            const headers = { ...answerHeaders(runs), ...ctx.idHeaders, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" }
            if (runs.length === 1) {
              // one choice: its pull straight to the socket, no stream stages and no merge
              const encode = encoders[0]
              const text = (chunk: Chunk.Chunk<ModelEvent>) => {
                let out = ""
                for (const event of chunk) out += encode(event)
                return out
              }
              yield* writePulled(ctx.response, 200, headers, encodedPull(runs[0].pull, { encode: text, end: Effect.sync(end), error: Encode.errorFrame }))
              return Reply.written
            }
            const merged = Stream.mergeAll(
              runs.map((run, index) => Stream.map(run.events, encoders[index])),
              { concurrency: "unbounded" }
            )
            const body = merged.pipe(
              Stream.concat(Stream.sync(end)),
              Stream.catchAll((error) => Stream.make(Encode.errorFrame(error)))
            )
            yield* writeStream(ctx.response, 200, headers, body)
            return Reply.written
          })
        )
      })
  })

const reasoningResolve = (decoded: DecodedChat) =>
  decoded.request.reasoningEffort !== undefined ? { reasoningEffort: decoded.request.reasoningEffort } : undefined

const modelsHandler = Effect.gen(function* () {
  const catalog = yield* Catalog
  return (ctx: RequestContext) =>
    Effect.suspend(() => {
      const entries = catalog.list(ctx.app)
      // with a Messages version header the list is the Messages shape, paged
      if (ctx.family === "messages") return Effect.map(messagesModelPage(entries, ctx.query), (page) => Reply.json(page))
      const data = entries.map((m) => ({ id: m.id, object: "model", created: 0, owned_by: m.ownedBy }))
      return Effect.succeed(Reply.json({ object: "list", data }))
    })
})

/** Chat-completions routes: `/v1/chat/completions`, `/v1/completions`, `/v1/models`. */
export const chatRoutes = Effect.gen(function* () {
  const chat = yield* makeHandler(false)
  const completions = yield* makeHandler(true)
  const models = yield* modelsHandler
  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: "/v1/chat/completions", auth: "key", handler: chat, label: "chat.completions" },
    { method: "POST", path: "/v1/completions", auth: "key", handler: completions, label: "completions" },
    { method: "GET", path: "/v1/models", auth: "key", handler: models, label: "models.list" }
  ]
  return routes
})
