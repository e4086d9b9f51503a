import { Effect } from "effect"
import { Settings } from "../../Config.js"
import { Ids } from "../../domain/Ids.js"
import { withRespondTool } from "../../domain/Structured.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { Catalog } from "../../services/routing/Catalog.js"
import { mayNameHostTool } from "../../services/tools/HostTools.js"
import { HostToolLoop } from "../../services/tools/Loop.js"
import { decodeBody } from "../Decode.js"
import { messagesModelPage } from "../messages/Models.js"
import { writeAnswer, type RunFacts } from "../Answer.js"
import { makeFileResolver } from "../FileParts.js"
import { chatFileRefs, decodeChat, decodeCompletion, type DecodedChat } from "./Decode.js"
import * as Encode from "./Encode.js"
import { ChatRequest, CompletionRequest } from "./Schema.js"

const decodeChatBody = decodeBody(ChatRequest)
const decodeCompletionBody = decodeBody(CompletionRequest)

/** Response headers every model answer carries. */
const answerHeaders = (runs: ReadonlyArray<RunFacts>): Record<string, string> => {
  const headers: Record<string, string> = { "x-gateway-session": runs.map((r) => r.sessionId).join(",") }
  const dropped = [...new Set(runs.flatMap((r) => r.droppedParams))]
  if (dropped.length > 0) headers["x-gateway-dropped-params"] = dropped.join(",")
  return headers
}

const makeHandler = (legacy: boolean) =>
  Effect.gen(function* () {
    const config = yield* Settings
    const runner = yield* HostToolLoop
    const resolveFiles = yield* makeFileResolver
    return (ctx: RequestContext) =>
      Effect.gen(function* () {
        const body = yield* ctx.json
        const { decoded, model, safetyId } = legacy
          ? yield* Effect.flatMap(decodeCompletionBody(body), (wire) =>
              Effect.map(decodeCompletion(wire, { maxChoices: ctx.app.maxChoices }), (decoded) => ({ decoded, model: wire.model, safetyId: stringOrUndefined(wire.safety_identifier) }))
            )
          : yield* Effect.flatMap(decodeChatBody(body), (wire) =>
              Effect.flatMap(resolveFiles(ctx.principal.app, chatFileRefs(wire), "openai"), (files) =>
                Effect.map(decodeChat(wire, { maxChoices: ctx.app.maxChoices, maxTools: config.maxTools, hostTool: mayNameHostTool(config, ctx.app.name) }, files), (decoded) => ({
                  decoded,
                  model: wire.model,
                  safetyId: stringOrUndefined(wire.safety_identifier)
                }))
              )
            )
        const request = withRespondTool(decoded.request)
        const meta: Encode.ChatMeta = {
          id: legacy ? Ids.completion() : Ids.chatCompletion(),
          created: Math.floor(Date.now() / 1000),
          model,
          reasoningOutput: ctx.app.reasoningOutput
        }
        const caller = callerOf(ctx, request.user ?? safetyId, model)
        const run = { caller, model, request, app: ctx.app, deadline: ctx.deadline, resolve: reasoningResolve(decoded) }
        return yield* writeAnswer(runner, {
          ctx,
          run,
          n: decoded.n,
          headers: answerHeaders,
          whole: (answers, usage) => Effect.succeed(legacy ? Encode.textCompletionBody(meta, answers, usage) : Encode.chatCompletionBody(meta, answers, usage)),
          stream: () => ({
            contentType: "text/event-stream; charset=utf-8",
            start: "",
            run: (index) => {
              if (legacy) return { event: (event) => Encode.encodeTextEvent(meta, index, event) }
              const state = Encode.newChoiceState()
              return { event: (event) => Encode.encodeChatEvent(meta, index, state, event) }
            },
            end: (usage) => Effect.succeed((decoded.includeUsage ? Encode.usageChunk(meta, usage, legacy ? "text_completion" : "chat.completion.chunk") : "") + Encode.doneFrame),
            error: Encode.errorFrame
          })
        })
      })
  })

const stringOrUndefined = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

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
