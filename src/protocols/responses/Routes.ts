import { Effect, Either, Option } from "effect"
import { Settings } from "../../Config.js"
import { emptyUsage, type CanonicalRequest } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { respondToolName, withRespondTool } from "../../domain/Structured.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { ItemMemory } from "../../services/responses/ItemMemory.js"
import { mayNameHostTool } from "../../services/tools/HostTools.js"
import { HostToolLoop } from "../../services/tools/Loop.js"
import { ResponseStore } from "../../services/responses/ResponseStore.js"
import { decodeBody } from "../Decode.js"
import { writeAnswer } from "../Answer.js"
import { makeFileResolver } from "../FileParts.js"
import { fetchEach, makeRemoteParts } from "../RemoteParts.js"
import { makeEncoder } from "./Events.js"
import { decodedBefore, fileRefs, fileUrls, itemType, listingShape, readInput, resolveReferences, toConversation, type Item } from "./Input.js"
import { incompleteReason, newResponseId, outputAsInput, outputItems, responseObject, type ResponseFrame } from "./Output.js"
import { ResponsesRequest } from "./Schema.js"
import { webSocketHandler, type Connection } from "./WebSocket.js"
import { Shutdown } from "../../http/Server.js"
import { planToolChoice, planTools, type ToolPlan } from "./Tools.js"

const decodeRequest = decodeBody(ResponsesRequest)

const unsupported = (param: string, why: string) => Errors.invalidRequest("unsupported_parameter", `${param}: ${why}`, { param })

/** Fields refused by spec 7.2 when sent with a value. */
const refusals = (wire: ResponsesRequest): GatewayError | undefined => {
  if (wire.conversation !== undefined && wire.conversation !== null) return unsupported("conversation", "conversations are not supported; chain with previous_response_id")
  if (wire.background === true) return unsupported("background", "background responses are not supported")
  if (wire.prompt !== undefined && wire.prompt !== null) return unsupported("prompt", "prompt templates are not supported")
  if (wire.top_logprobs !== undefined && wire.top_logprobs !== null) return unsupported("top_logprobs", "log probabilities are not supported")
  if (wire.truncation === "auto") return unsupported("truncation", "automatic truncation is not supported")
  return undefined
}

const fromEither = <A>(e: Either.Either<A, GatewayError>): Effect.Effect<A, GatewayError> => (Either.isRight(e) ? Effect.succeed(e.right) : Effect.fail(e.left))

const notFound = (id: string) => Errors.notFound("not_found", `No response found with id '${id}'`)

/** Everything decided before the model is called. */
interface Prepared {
  readonly wire: ResponsesRequest
  readonly request: CanonicalRequest
  readonly plan: ToolPlan
  /** every input item the model sees, history first, with ids */
  readonly input: ReadonlyArray<Item>
  readonly frame: ResponseFrame
  readonly headers: Record<string, string>
}

const structuredOf = (wire: ResponsesRequest, plan: ToolPlan, toolChoice: CanonicalRequest["toolChoice"]): Either.Either<CanonicalRequest["structured"], GatewayError> => {
  const format = wire.text?.format
  if (format === undefined || format === null || format.type === "text") return Either.right(undefined)
  if (format.type === "json_object") return Either.right({ name: "json_object", schema: { type: "object" }, jsonObject: true })
  if (toolChoice.type === "tool") return Either.left(unsupported("tool_choice", "a named tool cannot be combined with text.format json_schema"))
  if (plan.entries.has(respondToolName)) {
    return Either.left(Errors.invalidRequest("reserved_tool_name", `tools: the name ${respondToolName} is reserved when text.format is json_schema`, { param: "tools" }))
  }
  return Either.right({ name: format.name ?? "response", schema: format.schema ?? { type: "object" }, jsonObject: false })
}

export const responsesRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const runner = yield* HostToolLoop
  const store = yield* ResponseStore
  const memory = yield* ItemMemory

  const remoteParts = yield* makeRemoteParts
  const resolveFiles = yield* makeFileResolver
  const fetchRemote = (url: string) => remoteParts(url, { images: false })

  const prepare = (ctx: RequestContext, body: unknown, connection?: Connection) =>
    Effect.gen(function* () {
      const wire = yield* decodeRequest(body)
      const refused = refusals(wire)
      if (refused !== undefined) return yield* refused
      const app = ctx.principal.app
      let history: ReadonlyArray<Item> = []
      const last = connection?.last
      if (wire.previous_response_id && last !== undefined && last.id === wire.previous_response_id) {
        // the connection's own last response: found even when it was not stored
        history = [...last.input, ...outputAsInput(last.output)]
      } else if (wire.previous_response_id) {
        const previous = yield* store.get(app, wire.previous_response_id)
        if (Option.isNone(previous)) {
          return yield* Errors.invalidRequest("previous_response_not_found", `previous_response_id: no stored response ${wire.previous_response_id}`, {
            param: "previous_response_id"
          })
        }
        const output = previous.value.response.output
        history = [...previous.value.input, ...outputAsInput(Array.isArray(output) ? (output as ReadonlyArray<Item>) : [])]
      }
      const fresh = yield* resolveReferences(yield* fromEither(readInput(wire.input)), (id) => memory.lookup(app, id))
      const input = [...history, ...fresh.items]
      const typed = [...decodedBefore(history), ...fresh.typed]
      const remote = yield* fetchEach(fileUrls(typed), fetchRemote)
      const files = yield* resolveFiles(app, fileRefs(typed, history.length), "openai")
      const conversation = yield* fromEither(toConversation(typed, wire.instructions ?? undefined, history.length, remote, files))
      const plan = yield* fromEither(planTools(wire.tools ?? [], conversation.additionalTools, { onHostedTools: ctx.app.onHostedTools, maxTools: config.maxTools }))
      const toolChoice = yield* fromEither(planToolChoice(wire.tool_choice, plan, mayNameHostTool(config, ctx.app.name)))
      const structured = yield* fromEither(structuredOf(wire, plan, toolChoice))
      const parallelToolCalls = wire.parallel_tool_calls !== false
      const request: CanonicalRequest = {
        system: conversation.system,
        messages: conversation.messages,
        tools: plan.tools,
        toolChoice,
        sampling: { ...(wire.temperature != null ? { temperature: wire.temperature } : {}), ...(wire.top_p != null ? { topP: wire.top_p } : {}) },
        ...(wire.max_output_tokens != null ? { maxOutputTokens: wire.max_output_tokens } : {}),
        ...(wire.reasoning?.effort ? { reasoningEffort: wire.reasoning.effort } : {}),
        ...(structured !== undefined ? { structured } : {}),
        parallelToolCalls,
        stream: wire.stream === true,
        ...(wire.user ? { user: wire.user } : {}),
        ...(wire.prompt_cache_key ? { conversation: wire.prompt_cache_key } : {})
      }
      const headers: Record<string, string> = {}
      if (plan.droppedHosted.length > 0) headers["x-gateway-dropped-tools"] = plan.droppedHosted.join(",")
      if (!parallelToolCalls) headers["x-gateway-parallel-tools"] = "limited"
      const frame: ResponseFrame = {
        id: newResponseId(),
        createdAt: Math.floor(Date.now() / 1000),
        model: wire.model,
        instructions: wire.instructions ?? null,
        maxOutputTokens: wire.max_output_tokens ?? null,
        parallelToolCalls,
        previousResponseId: wire.previous_response_id ?? null,
        reasoning: { effort: wire.reasoning?.effort ?? null, summary: null },
        store: wire.store !== false,
        temperature: wire.temperature ?? null,
        topP: wire.top_p ?? null,
        text: { format: wire.text?.format ?? { type: "text" } },
        toolChoice: wire.tool_choice ?? "auto",
        tools: plan.echo,
        user: wire.user ?? null,
        metadata: wire.metadata ?? {}
      }
      return { wire, request, plan, input, frame, headers } satisfies Prepared
    })

  /** Keep a finished answer: stored record (when `store`) and its items for item_reference. */
  const keep = (ctx: RequestContext, prepared: Prepared, response: Readonly<Record<string, unknown>>, output: ReadonlyArray<Item>, connection?: Connection) =>
    Effect.zipRight(
      Effect.sync(() => {
        if (connection !== undefined) connection.last = { id: prepared.frame.id, input: prepared.input, output }
      }),
      keepStored(ctx, prepared, response, output)
    )

  const keepStored = (ctx: RequestContext, prepared: Prepared, response: Readonly<Record<string, unknown>>, output: ReadonlyArray<Item>) =>
    prepared.frame.store
      ? // both may wait for the database (PostgreSQL): at the same time
        Effect.asVoid(
          Effect.zip(
            store.save(
              { id: prepared.frame.id, app: ctx.principal.app, createdAt: prepared.frame.createdAt * 1000, response, input: prepared.input },
              { maxAgeDays: ctx.app.maxAgeDays }
            ),
            memory.remember(ctx.principal.app, prepared.frame.id, output),
            { concurrent: true }
          )
        )
      : Effect.void


  /**
   * A response: the POST body over HTTP, a `response.create` message over a WebSocket (then
   * `connection` holds the connection's last response, and `generate: false` calls no model).
   */
  const answer = (ctx: RequestContext, body: unknown, connection?: Connection) =>
    Effect.gen(function* () {
      const prepared = yield* prepare(ctx, body, connection)
      const { frame, plan, request: canonical } = prepared
      const request = withRespondTool(canonical)
      const options = { reasoningOutput: ctx.app.reasoningOutput, parallelToolCalls: canonical.parallelToolCalls }
      if (connection !== undefined && !connection.generate) {
        // `generate: false` (WebSocket mode): the input is kept to chain on, no model is called
        const response = responseObject(frame, { status: "completed", output: [], usage: emptyUsage, finish: "stop" })
        yield* keep(ctx, prepared, response, [], connection)
        const encoder = makeEncoder({ plan, ...options })
        return Reply.text(encoder.start(responseObject(frame, { status: "in_progress" })) + encoder.terminal("response.completed", response), "text/event-stream; charset=utf-8")
      }
      const safetyId = prepared.wire.safety_identifier
      const runOptions = {
        caller: callerOf(ctx, canonical.user ?? (typeof safetyId === "string" ? safetyId : undefined), prepared.wire.model),
        model: prepared.wire.model,
        request,
        app: ctx.app,
        deadline: ctx.deadline,
        ...(canonical.reasoningEffort !== undefined ? { resolve: { reasoningEffort: canonical.reasoningEffort } } : {})
      }

      return yield* writeAnswer(runner, {
        ctx,
        run: runOptions,
        headers: (runs) => {
          const headers: Record<string, string> = { ...prepared.headers, "x-gateway-session": runs[0].sessionId }
          if (runs[0].droppedParams.length > 0) headers["x-gateway-dropped-params"] = runs[0].droppedParams.join(",")
          return headers
        },
        whole: ([answer]) => {
          const output = outputItems(answer, plan, options)
          const status = incompleteReason(answer.finishReason) !== undefined ? "incomplete" : "completed"
          const response = responseObject(frame, { status, output, usage: answer.usage, finish: answer.finishReason })
          return Effect.as(keep(ctx, prepared, response, output, connection), response)
        },
        stream: () => {
          const encoder = makeEncoder({ plan, ...options })
          return {
            contentType: "text/event-stream; charset=utf-8",
            start: encoder.start(responseObject(frame, { status: "in_progress" })),
            run: () => ({ event: encoder.event }),
            // the answer is stored before `response.completed` is sent
            end: () =>
              Effect.suspend(() => {
                const closed = encoder.close()
                const status = incompleteReason(closed.finish) !== undefined ? "incomplete" : "completed"
                const response = responseObject(frame, { status, output: closed.output, usage: closed.usage, finish: closed.finish })
                return keep(ctx, prepared, response, closed.output, connection).pipe(
                  Effect.as(closed.frames + encoder.terminal(status === "incomplete" ? "response.incomplete" : "response.completed", response))
                )
              }),
            error: (error) => {
              const closed = encoder.close()
              return (
                closed.frames +
                encoder.terminal("response.failed", responseObject(frame, { status: "failed", output: closed.output, error: { code: error.code, message: error.message } }))
              )
            }
          }
        }
      })
    })

  const create = (ctx: RequestContext) => Effect.flatMap(ctx.json, (body) => answer(ctx, body))

  const idOf = (path: string, suffix = ""): Readonly<Record<string, string>> | undefined => {
    const match = new RegExp(`^/v1/responses/([^/]+)${suffix}$`).exec(path)
    return match === null ? undefined : { id: decodeURIComponent(match[1]) }
  }

  const retrieve = (ctx: RequestContext) =>
    Effect.gen(function* () {
      if (ctx.query.get("stream") === "true") return yield* unsupported("stream", "a stored response cannot be replayed as a stream")
      const record = yield* store.get(ctx.principal.app, ctx.params.id)
      if (Option.isNone(record)) return yield* notFound(ctx.params.id)
      return Reply.json(record.value.response)
    })

  const remove = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const removed = yield* store.remove(ctx.principal.app, ctx.params.id)
      if (!removed) return yield* notFound(ctx.params.id)
      yield* memory.forget(ctx.principal.app, ctx.params.id)
      return Reply.json({ id: ctx.params.id, object: "response.deleted", deleted: true })
    })

  const inputItems = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const limitText = ctx.query.get("limit")
      const limit = limitText === null ? 20 : Number(limitText)
      if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
        return yield* Errors.invalidRequest("invalid_request_error", "limit: must be an integer from 1 to 100", { param: "limit" })
      }
      const order = ctx.query.get("order") ?? "desc"
      if (order !== "asc" && order !== "desc") return yield* Errors.invalidRequest("invalid_request_error", "order: must be asc or desc", { param: "order" })
      const record = yield* store.get(ctx.principal.app, ctx.params.id)
      if (Option.isNone(record)) return yield* notFound(ctx.params.id)
      const listed = record.value.input.filter((i) => itemType(i) !== "additional_tools").map(listingShape)
      if (order === "desc") listed.reverse()
      let start = 0
      const after = ctx.query.get("after")
      if (after !== null) {
        const at = listed.findIndex((i) => i.id === after)
        if (at < 0) return yield* Errors.invalidRequest("invalid_request_error", `after: no input item ${after} in this response`, { param: "after" })
        start = at + 1
      }
      const data = listed.slice(start, start + limit)
      return Reply.json({
        object: "list",
        data,
        first_id: data[0]?.id ?? null,
        last_id: data[data.length - 1]?.id ?? null,
        has_more: start + limit < listed.length
      })
    })

  const socket = webSocketHandler(config, yield* Shutdown, answer)

  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: "/v1/responses", auth: "key", handler: create, label: "responses.create" },
    { method: "GET", path: "/v1/responses", auth: "key", handler: socket, label: "responses.websocket" },
    { method: "GET", path: (p) => idOf(p), template: "/v1/responses/{id}", auth: "key", handler: retrieve, label: "responses.get" },
    { method: "DELETE", path: (p) => idOf(p), template: "/v1/responses/{id}", auth: "key", handler: remove, label: "responses.delete" },
    { method: "GET", path: (p) => idOf(p, "/input_items"), template: "/v1/responses/{id}/input_items", auth: "key", handler: inputItems, label: "responses.input_items" }
  ]
  return routes
})
