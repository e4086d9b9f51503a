import { Effect, Either } from "effect"
import type { ModelEvent } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { withRespondTool } from "../../domain/Structured.js"
import { estimateTokens, geminiCalibration } from "../../domain/TokenEstimate.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { Settings } from "../../Config.js"
import { Catalog, type ModelEntry } from "../../services/routing/Catalog.js"
import type { RunOptions } from "../../services/runner/ModelRunner.js"
import { mayNameHostTool } from "../../services/tools/HostTools.js"
import { HostToolLoop } from "../../services/tools/Loop.js"
import { decodeAt } from "../Decode.js"
import { writeAnswer, type RunFacts } from "../Answer.js"
import { makeFileResolver } from "../FileParts.js"
import { makeTokenCounter } from "../CountTokens.js"
import { fetchEach, makeRemoteParts } from "../RemoteParts.js"
import { makeStopFilter } from "../StopSequences.js"
import { decodeGemini, fileUris, refuse, type DecodedGemini } from "./Decode.js"
import { arrayForm, makeCandidateEncoder, newResponseId, responseBody, sseForm, usageChunk, type GeminiMeta, type StreamForm } from "./Encode.js"
import { isModelMethod, parseModelAction, parseModelName } from "./Path.js"
import { camelKeys, CountTokensRequest, GenerateContentRequest } from "./Schema.js"

const decodeRequest = decodeAt(GenerateContentRequest)
const decodeCount = decodeAt(CountTokensRequest)

/** The body as a camelCase object (every field is read in camelCase and snake_case). */
const bodyObject = (body: unknown): Effect.Effect<Record<string, unknown>, GatewayError> =>
  typeof body === "object" && body !== null && !Array.isArray(body)
    ? Effect.succeed(camelKeys(body) as Record<string, unknown>)
    : Effect.fail(Errors.invalidRequest("invalid_argument", "The request body must be a JSON object"))

/** Response headers of a model answer: every candidate's session, and the params left out. */
const runHeaders = (runs: ReadonlyArray<RunFacts>): Record<string, string> => {
  const headers: Record<string, string> = { "x-gateway-session": runs.map((r) => r.sessionId).join(",") }
  const dropped = [...new Set(runs.flatMap((r) => r.droppedParams))]
  if (dropped.length > 0) headers["x-gateway-dropped-params"] = dropped.join(",")
  return headers
}

/** The Gemini model entry of a catalog entry (`models/<id>`). */
const modelEntry = (entry: ModelEntry): Record<string, unknown> => ({
  name: `models/${entry.id}`,
  displayName: entry.displayName,
  ...(entry.contextLimit !== undefined ? { inputTokenLimit: entry.contextLimit } : {}),
  supportedGenerationMethods: ["generateContent", "streamGenerateContent", "countTokens"]
})

/** The events one candidate passes on: stop sequences matched by the gateway on answer text. */
const candidateEvents = (decoded: DecodedGemini): ((event: ModelEvent) => ReadonlyArray<ModelEvent>) => makeStopFilter(decoded.stopSequences).event

export const geminiRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const runner = yield* HostToolLoop
  const catalog = yield* Catalog
  const remoteParts = yield* makeRemoteParts
  const resolveFiles = yield* makeFileResolver
  const count = yield* makeTokenCounter

  /** Decode a generate-content body, fetching the http(s) `fileData` it names first. */
  const decode = (wire: Record<string, unknown>, ctx: RequestContext, stream: boolean) =>
    Effect.gen(function* () {
      const request = yield* decodeRequest(wire, "")
      const uris = fileUris(request.contents, ctx.origin)
      const files = yield* resolveFiles(ctx.principal.app, uris.stored, "gemini")
      const remote = yield* fetchEach(uris.remote, (uri) => remoteParts(uri, { images: true }))
      return yield* Either.match(decodeGemini(request, { maxChoices: ctx.app.maxChoices, stream, remote, files, origin: ctx.origin, hostTool: mayNameHostTool(config, ctx.app.name) }), { onLeft: Effect.fail, onRight: Effect.succeed })
    })

  const runOptions = (model: string, decoded: DecodedGemini, ctx: RequestContext): RunOptions => ({
    caller: callerOf(ctx, undefined, model),
    model,
    request: withRespondTool(decoded.request),
    app: ctx.app,
    deadline: ctx.deadline,
    ...(decoded.reasoning !== undefined ? { resolve: { reasoningEffort: decoded.reasoning.level, nearestAbove: decoded.reasoning.nearestAbove } } : {})
  })

  /** `:generateContent` (whole) and `:streamGenerateContent` (SSE or a JSON array): one call per candidate. */
  const answer = (ctx: RequestContext, model: string, decoded: DecodedGemini, form: () => StreamForm) => {
    const meta: GeminiMeta = { modelVersion: model, responseId: newResponseId(), multi: decoded.candidateCount > 1 }
    return writeAnswer(runner, {
      ctx,
      run: runOptions(model, decoded, ctx),
      n: decoded.candidateCount,
      filter: () => candidateEvents(decoded),
      headers: runHeaders,
      whole: (answers, usage) => Effect.succeed(responseBody(meta, answers, usage)),
      stream: () => {
        const body = form()
        return {
          contentType: body.contentType,
          start: body.open,
          run: (index) => {
            const encoder = makeCandidateEncoder(meta, index)
            return {
              event: (event) => {
                let text = ""
                for (const item of encoder.event(event)) text += body.item(item)
                return text
              },
              end: () => body.item(encoder.end())
            }
          },
          // several candidates: a last chunk with their summed usage
          end: (usage) => Effect.succeed((meta.multi ? body.item(usageChunk(meta, usage)) : "") + body.close),
          error: body.error
        }
      }
    })
  }

  const generate = (ctx: RequestContext, model: string) =>
    Effect.flatMap(
      Effect.flatMap(ctx.json, (body) => Effect.flatMap(bodyObject(body), (wire) => decode(wire, ctx, false))),
      (decoded) => answer(ctx, model, decoded, sseForm)
    )

  const streamGenerate = (ctx: RequestContext, model: string) =>
    Effect.gen(function* () {
      const alt = ctx.query.get("alt")
      if (alt !== null && alt !== "sse" && alt !== "json") return yield* refuse("alt", "must be sse or json")
      const decoded = yield* decode(yield* bodyObject(yield* ctx.json), ctx, true)
      return yield* answer(ctx, model, decoded, alt === "sse" ? sseForm : arrayForm)
    })

  /**
   * The input the request would send: the upstream's own count when the model runs on a native
   * Messages upstream, else an estimate; with the refusals a real request gets.
   */
  const countTokens = (ctx: RequestContext, model: string) =>
    Effect.gen(function* () {
      const body = yield* bodyObject(yield* ctx.json)
      const wire = yield* decodeCount(body, "")
      const inner = wire.generateContentRequest
      const decoded = inner !== undefined && inner !== null ? yield* decode(inner, ctx, false) : yield* decode(body, ctx, false)
      // the model must exist and be allowed for this app, as for a real request (with its thinking variant)
      const resolved = yield* catalog.resolve(model, ctx.app, decoded.reasoning !== undefined ? { reasoningEffort: decoded.reasoning.level, nearestAbove: decoded.reasoning.nearestAbove } : undefined)
      // the app's host tools count as offered (with a request's side effects: app directory, servers, not_ready)
      const hosted = yield* runner.counted(ctx.app.name, model, decoded.request)
      const request = withRespondTool({ ...hosted, system: catalog.system(model, ctx.app, hosted.system) })
      const offered = request.toolChoice.type === "none" ? { ...request, tools: [] } : request
      const tokens = yield* count(resolved, request, () => estimateTokens(offered, geminiCalibration), ctx.deadline)
      return Reply.json({ totalTokens: tokens })
    })

  const unsupported = (ctx: RequestContext) =>
    Effect.fail(Errors.notFound("not_found", `Method ${ctx.params.method} is not supported; models take generateContent, streamGenerateContent and countTokens`))

  /** `POST /v1beta/models/{model}:<method>` for one method, or (no method given) for any other. */
  const actionPath = (method?: string) => (path: string) => {
    const parsed = parseModelAction(path)
    if (parsed === undefined) return undefined
    if (method === undefined ? isModelMethod(parsed.method) : parsed.method !== method) return undefined
    return parsed
  }

  const listModels = (ctx: RequestContext) => Effect.succeed(Reply.json({ models: catalog.list(ctx.app).map(modelEntry) }))

  const getModel = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const id = ctx.params.model
      const listed = catalog.list(ctx.app).find((e) => e.id === id)
      if (listed !== undefined) return Reply.json(modelEntry(listed))
      // a `<provider>/<model>` id the catalog resolves without listing it
      const resolved = yield* catalog.resolve(id, ctx.app).pipe(Effect.mapError(() => Errors.notFound("not_found", `Model models/${id} was not found`)))
      const mc = resolved.targets[0]?.modelConfig
      const limit = mc?.contextLimit
      return Reply.json(modelEntry({ id, displayName: mc?.label ?? id, ownedBy: resolved.targets[0]?.provider ?? "gateway", ...(limit !== undefined ? { contextLimit: limit } : {}) }))
    })

  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: actionPath("generateContent"), template: "/v1beta/models/{model}:generateContent", auth: "key", handler: (ctx) => generate(ctx, ctx.params.model), label: "gemini.generate_content" },
    { method: "POST", path: actionPath("streamGenerateContent"), template: "/v1beta/models/{model}:streamGenerateContent", auth: "key", handler: (ctx) => streamGenerate(ctx, ctx.params.model), label: "gemini.stream_generate_content" },
    { method: "POST", path: actionPath("countTokens"), template: "/v1beta/models/{model}:countTokens", auth: "key", handler: (ctx) => countTokens(ctx, ctx.params.model), label: "gemini.count_tokens" },
    // embedContent, batchEmbedContents and any other method: 404 NOT_FOUND
    { method: "POST", path: actionPath(), template: "/v1beta/models/{model}:{method}", auth: "key", handler: unsupported, label: "gemini.unsupported_method" },
    { method: "GET", path: "/v1beta/models", auth: "key", handler: listModels, label: "gemini.models.list" },
    {
      method: "GET",
      path: (path) => {
        const model = parseModelName(path)
        return model === undefined ? undefined : { model }
      },
      template: "/v1beta/models/{model}",
      auth: "key",
      handler: getModel,
      label: "gemini.models.get"
    }
  ]
  return routes
})
