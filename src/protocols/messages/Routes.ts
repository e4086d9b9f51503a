import { Effect, Either } from "effect"
import { Settings } from "../../Config.js"
import type { CanonicalRequest, ModelEvent } from "../../domain/Canonical.js"
import { withRespondTool } from "../../domain/Structured.js"
import { attributionOf } from "../../http/Attribution.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { estimateTokens, messagesCalibration } from "../../domain/TokenEstimate.js"
import { Catalog } from "../../services/routing/Catalog.js"
import { mayNameHostTool } from "../../services/tools/HostTools.js"
import { HostToolLoop } from "../../services/tools/Loop.js"
import { decodeBody } from "../Decode.js"
import { writeAnswer, type RunFacts } from "../Answer.js"
import { makeStopFilter } from "../StopSequences.js"
import { makeFileResolver } from "../FileParts.js"
import { makeTokenCounter } from "../CountTokens.js"
import { applyCaching } from "./Caching.js"
import { decodeMessages, messagesFileRefs, type DecodedMessages } from "./Decode.js"
import { errorEvent, makeMessageEncoder, messageBody, newMessageId } from "./Encode.js"
import { makePlaceholderRewriter } from "./Placeholders.js"
import { CountTokensRequest, MessagesRequest } from "./Schema.js"
import { clientBetas } from "../../providers/anthropic/Betas.js"

const decodeRequest = decodeBody(MessagesRequest)

/** Tool-call ids of the conversation, with their tool names. */
const knownCallIds = (request: CanonicalRequest): ReadonlyMap<string, string> => {
  const ids = new Map<string, string>()
  for (const message of request.messages) for (const part of message.parts) if (part.type === "tool_call") ids.set(part.id, part.name)
  return ids
}

/** Reasoning deltas with placeholder tool ids rewritten to tool names. */
const rewriteReasoning = (rewrite: (text: string) => string) => (event: ModelEvent): ModelEvent =>
  event._tag === "ReasoningDelta" && event.text !== "" ? { ...event, text: rewrite(event.text) } : event
const decodeCount = decodeBody(CountTokensRequest)

/** Keeps only the first tool call (`disable_parallel_tool_use`). */
const firstCallOnly = () => {
  let calls = 0
  return (event: ModelEvent): ReadonlyArray<ModelEvent> => (event._tag === "ToolCall" && calls++ > 0 ? [] : [event])
}

/** Headers of a Messages answer that depend on the run. */
const runHeaders = (decoded: DecodedMessages, run: RunFacts): Record<string, string> => {
  const headers: Record<string, string> = { "x-gateway-session": run.sessionId }
  if (run.droppedParams.length > 0) headers["x-gateway-dropped-params"] = run.droppedParams.join(",")
  // thinking asked for, but the model has no variant to think with: it runs without thinking
  if (decoded.thinking && run.target.variant === undefined) headers["x-gateway-thinking"] = "unavailable"
  if (!decoded.request.parallelToolCalls) headers["x-gateway-parallel-tools"] = "limited"
  return headers
}

export const messagesRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const runner = yield* HostToolLoop
  const catalog = yield* Catalog
  const resolveFiles = yield* makeFileResolver
  const count = yield* makeTokenCounter

  const create = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const wire = yield* decodeRequest(yield* ctx.json)
      const stream = wire.stream === true
      const files = yield* resolveFiles(ctx.principal.app, messagesFileRefs(wire), "messages")
      const decoded = yield* Either.match(decodeMessages(wire, { maxTools: config.maxTools, stream, files, hostTool: mayNameHostTool(config, ctx.app.name) }), { onLeft: Effect.fail, onRight: Effect.succeed })
      const betas = clientBetas(ctx.headers)
      const metadataUser = typeof wire.metadata === "object" && wire.metadata !== null && "user_id" in wire.metadata ? wire.metadata.user_id : undefined
      // Claude Code sends metadata.user_id as JSON ({device_id, account_uuid, session_id}): the user and session are read from it
      const attribution = attributionOf(ctx.headers, metadataUser)
      // the conversation's name for affinity: the client's session when there is one (the runner puts it
      // first, on every protocol), else the plain metadata.user_id
      const conversation = typeof metadataUser === "string" && metadataUser !== "" ? { conversation: metadataUser } : {}
      const request = withRespondTool(betas.length === 0 ? { ...decoded.request, ...conversation } : { ...decoded.request, ...conversation, betas })
      // with host tools: added before the caching rules run, which then count them as tools that reach the model
      const refinish = {
        base: () => (betas.length === 0 ? { ...decoded.uncached, ...conversation } : { ...decoded.uncached, ...conversation, betas }),
        finish: (hosted: CanonicalRequest) => withRespondTool(applyCaching(hosted))
      }
      const runOptions = {
        caller: callerOf(ctx, attribution.user, wire.model, attribution),
        model: wire.model,
        request,
        app: ctx.app,
        deadline: ctx.deadline,
        ...(decoded.level !== undefined ? { resolve: { reasoningEffort: decoded.level, nearestAbove: true } } : {})
      }
      const meta = { id: newMessageId(), model: wire.model, thinking: decoded.thinking }

      // the events the client sees: tool ids in reasoning rewritten, one call at most without parallel
      // tool use, and cut at a stop sequence the gateway matched
      const stops = makeStopFilter(decoded.stopSequences)
      const limit = firstCallOnly()
      const rewrite = rewriteReasoning(makePlaceholderRewriter(knownCallIds(decoded.request)))
      const filter = (event: ModelEvent): ReadonlyArray<ModelEvent> => {
        const rewritten = rewrite(event)
        const allowed = decoded.request.parallelToolCalls ? [rewritten] : limit(rewritten)
        return allowed.length === 1 ? stops.event(allowed[0]) : allowed.flatMap(stops.event)
      }
      return yield* writeAnswer(runner, {
        ctx,
        run: runOptions,
        refinish,
        filter: () => filter,
        headers: (runs) => runHeaders(decoded, runs[0]),
        whole: (answers) => Effect.succeed(messageBody(meta, answers[0], stops.matched())),
        stream: () => {
          const encoder = makeMessageEncoder(meta)
          return {
            contentType: "text/event-stream; charset=utf-8",
            start: encoder.start(),
            run: () => ({ event: encoder.event }),
            end: () => Effect.sync(() => encoder.end(stops.matched())),
            error: errorEvent,
            // a structured answer that is missing is, on this stream, an error event after message_start
            missingStructuredInStream: true
          }
        }
      })
    })

  /**
   * The input the request would send: the upstream's own count on a native Messages upstream, else
   * an estimate; with the refusals a real request gets.
   */
  const countTokens = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const wire = yield* decodeCount(yield* ctx.json)
      const files = yield* resolveFiles(ctx.principal.app, messagesFileRefs(wire), "messages")
      const decoded = yield* Either.match(decodeMessages(wire, { maxTools: config.maxTools, stream: false, files, hostTool: mayNameHostTool(config, ctx.app.name) }), { onLeft: Effect.fail, onRight: Effect.succeed })
      // the model must exist and be allowed for this app, as for a real request (with its thinking variant)
      const resolved = yield* catalog.resolve(wire.model, ctx.app, decoded.level !== undefined ? { reasoningEffort: decoded.level, nearestAbove: true } : undefined)
      // the app's host tools count as offered (with a request's side effects: app directory, servers, not_ready)
      const hosted = yield* runner.counted(ctx.app.name, wire.model, decoded.request)
      // the client's beta flags go with an upstream count as with a real call
      const betas = clientBetas(ctx.headers)
      const request = withRespondTool({ ...hosted, system: catalog.system(wire.model, ctx.app, hosted.system), ...(betas.length > 0 ? { betas } : {}) })
      const offered = request.toolChoice.type === "none" ? { ...request, tools: [] } : request
      const tokens = yield* count(resolved, request, () => estimateTokens(offered, messagesCalibration), ctx.deadline)
      return Reply.json({ input_tokens: tokens })
    })

  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: "/v1/messages", auth: "key", handler: create, label: "messages.create" },
    { method: "POST", path: "/v1/messages/count_tokens", auth: "key", handler: countTokens, label: "messages.count_tokens" }
  ]
  return routes
})
