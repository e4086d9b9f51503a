import { Settings } from "../../Config.js"
import { Chunk, Context, Effect, ExecutionStrategy, Exit, Fiber, Layer, Option, Scope } from "effect"
import {
  addUsage,
  emptyUsage,
  foldEvents,
  ModelEvent,
  type AssistantPart,
  type CanonicalRequest,
  type FinishReason,
  type Message,
  type SignatureFamily,
  type ToolCall,
  type ToolResultPart,
  type Usage
} from "../../domain/Canonical.js"
import type { GatewayError } from "../../domain/Errors.js"
import { ModelRunner, type CompletedRun, type EventPull, type RunOptions, type StartedRun } from "../runner/ModelRunner.js"
import { HostTools, type Offer } from "./HostTools.js"

/**
 * The host tool loop. When the model calls host tools, the gateway runs them (concurrently), hands
 * the results back as the tools' results and calls the model again, until the model answers with
 * text, calls a caller tool, or the app's `maxHostToolRounds` model calls are made (then the answer
 * ends as cut short: finish reason `length`). A caller tool call in a turn with host calls is set
 * aside: the model is called again with the host results and may call it again, informed.
 *
 * The client sees one answer: the text (and reasoning) of every round in order, its own tool calls
 * from the last round, the usage summed over the rounds; host calls and results are not shown and
 * are not part of the history the client sends back. Every model call is its own usage record,
 * admitted and settled under the app's limits like any call.
 */

/** What the loops of one answer did, for its headers and metrics. */
export interface LoopFacts {
  /** host tool calls run */
  hostCalls: number
  /** the session id of every model call, in order */
  readonly sessions: Array<string>
}

/** A request ready to run: host tools applied, and the runner that loops over them (or the plain one). */
export interface Prepared {
  readonly run: RunOptions
  readonly runner: ModelRunner["Type"]
  /** set when host tools are offered */
  readonly facts?: LoopFacts
}

/**
 * For a protocol whose request is finished after its tools are known (Messages: the caching rules
 * place a breakpoint on the last tool and give 1h TTLs only when no tools reach the model): the
 * request before that step, and the step. With host tools offered, they are added to `base` and
 * `finish` is applied to the result; without, the run's request is used as it is.
 */
export interface Refinish {
  /** built only when host tools are offered */
  readonly base: () => CanonicalRequest
  readonly finish: (request: CanonicalRequest) => CanonicalRequest
}

/** How often a stream waiting on host tools sends a keep-alive. */
export const KEEP_ALIVE_MS = 5_000

/** Between the text of two rounds, so that sentences do not run together. */
const ROUND_SEPARATOR = "\n\n"

/**
 * The assistant turn a round adds to the conversation: its reasoning, text and host calls (never
 * the caller's), in the order the model gave them. Each signature stays on the reasoning it closes,
 * just before the part it came with: Anthropic signs each thinking block (several blocks must go
 * back as they came), Gemini signs the part that follows (the first function call of a turn).
 */
const assistantTurn = (events: ReadonlyArray<ModelEvent>, isHost: (call: ToolCall) => boolean): Message => {
  const parts: Array<AssistantPart> = []
  // redacted reasoning carries no family of its own: it is the family of the round's signatures
  let family: SignatureFamily | undefined
  for (const event of events) if (event._tag === "ReasoningDelta" && event.family !== undefined) family = event.family
  let reasoning: string | undefined
  let text = ""
  const closeText = () => {
    if (text !== "") parts.push({ type: "text", text })
    text = ""
  }
  const closeReasoning = () => {
    if (reasoning !== undefined && reasoning !== "") parts.push({ type: "reasoning", text: reasoning })
    reasoning = undefined
  }
  for (const event of events) {
    switch (event._tag) {
      case "ReasoningDelta":
        closeText()
        reasoning = (reasoning ?? "") + event.text
        if (event.signature !== undefined) {
          parts.push({ type: "reasoning", text: reasoning, signature: event.signature, ...(event.family !== undefined ? { family: event.family } : {}) })
          reasoning = undefined
        }
        break
      case "RedactedReasoning":
        closeText()
        closeReasoning()
        parts.push({ type: "reasoning", text: "", redacted: event.data, ...(family !== undefined ? { family } : {}) })
        break
      case "TextDelta":
        closeReasoning()
        text += event.text
        break
      case "ToolCall":
        closeText()
        closeReasoning()
        if (isHost(event.call)) parts.push({ type: "tool_call", id: event.call.id, name: event.call.name, arguments: event.call.arguments })
        break
    }
  }
  closeText()
  closeReasoning()
  return { role: "assistant", parts }
}

/** The request of the next round: the conversation with this round's host exchange appended. */
const nextRequest = (
  request: CanonicalRequest,
  events: ReadonlyArray<ModelEvent>,
  isHost: (call: ToolCall) => boolean,
  results: ReadonlyArray<ToolResultPart>
): CanonicalRequest => ({
  ...request,
  messages: [...request.messages, assistantTurn(events, isHost), { role: "tool", parts: results }],
  // a forced call was made: the next round may answer
  toolChoice: request.toolChoice.type === "tool" || request.toolChoice.type === "required" ? { type: "auto" } : request.toolChoice
})

export class HostToolLoop extends Context.Tag("gateway/HostToolLoop")<
  HostToolLoop,
  {
    /**
     * The request with the app's host tools offered beside the caller's (checked for clashes), and
     * the runner that runs it: the loop when host tools are offered, else the plain runner.
     */
    readonly prepare: (run: RunOptions, refinish?: Refinish) => Effect.Effect<Prepared, GatewayError>
    /** config `streamKeepAliveMs`: the longest a started stream stays silent */
    readonly keepAliveMs: number
    /** A request as a count sees it: with the host tools this app's request to this model would be offered. */
    readonly counted: (app: string, model: string, request: CanonicalRequest) => Effect.Effect<CanonicalRequest, GatewayError>
  }
>() {
  static readonly layer = Layer.effect(
    HostToolLoop,
    Effect.gen(function* () {
      const base = yield* ModelRunner
      const hostTools = yield* HostTools

      const runHostCalls = (offer: Offer, calls: ReadonlyArray<ToolCall>, facts: LoopFacts) =>
        Effect.tap(
          // one call (the usual turn) runs in this fiber: a concurrent forEach forks a child fiber even for one
          calls.length === 1
            ? Effect.map(hostTools.call(offer, calls[0]), (result) => [result])
            : Effect.forEach(calls, (call) => hostTools.call(offer, call), { concurrency: "unbounded" }),
          () => Effect.sync(() => void (facts.hostCalls += calls.length))
        )

      const loopRunner = (offer: Offer, facts: LoopFacts): ModelRunner["Type"] => {
        const isHost = (call: ToolCall) => offer.byName.has(call.name)

        const complete = (options: RunOptions): Effect.Effect<CompletedRun, GatewayError> => {
          const shown: Array<ModelEvent> = []
          const sessions: Array<string> = []
          let total: Usage = emptyUsage
          let textShown = false
          const round = (request: CanonicalRequest, rounds: number): Effect.Effect<CompletedRun, GatewayError> =>
            Effect.flatMap(base.complete({ ...options, request }), (run) => {
              facts.sessions.push(run.sessionId)
              sessions.push(run.sessionId)
              const answer = foldEvents(run.events)
              total = addUsage(total, answer.usage)
              let separated = !textShown
              for (const event of run.events) {
                if (event._tag === "TextDelta") {
                  if (event.text === "") continue
                  if (!separated) shown.push(ModelEvent.text(ROUND_SEPARATOR))
                  separated = true
                  textShown = true
                  shown.push(event)
                } else if (event._tag === "ReasoningDelta" || event._tag === "RedactedReasoning") shown.push(event)
              }
              const host = answer.toolCalls.filter(isHost)
              const last = host.length === 0 || rounds >= offer.maxRounds
              if (last) {
                if (host.length === 0) for (const call of answer.toolCalls) shown.push(ModelEvent.toolCall(call))
                const finish: FinishReason = host.length > 0 ? "length" : answer.finishReason
                shown.push(ModelEvent.usage(total), ModelEvent.finish(finish))
                return Effect.succeed({ ...run, sessionId: sessions.join(","), events: shown })
              }
              return Effect.flatMap(runHostCalls(offer, host, facts), (results) => round(nextRequest(request, run.events, isHost, results), rounds + 1))
            })
          return round(options.request, 1)
        }

        const start = (options: RunOptions): Effect.Effect<StartedRun, GatewayError, Scope.Scope> =>
          Effect.flatMap(Effect.scope, (requestScope) =>
            Effect.flatMap(Scope.fork(requestScope, ExecutionStrategy.sequential), (firstScope) =>
              Effect.map(Scope.extend(base.start(options), firstScope), (first): StartedRun => {
                facts.sessions.push(first.sessionId)
                let total: Usage = emptyUsage
                let request = options.request
                let rounds = 1
                let textShown = false
                // this round's
                let scope = firstScope
                let pull: EventPull = first.pull
                let events: Array<ModelEvent> = []
                let usage: Usage = emptyUsage
                let separated = true
                let waiting: Fiber.RuntimeFiber<ReadonlyArray<ToolResultPart>> | undefined
                let done = false

                const end = Effect.fail(Option.none())

                /** The events the client sees of a chunk of this round. */
                const shownOf = (chunk: Chunk.Chunk<ModelEvent>): Chunk.Chunk<ModelEvent> => {
                  const out: Array<ModelEvent> = []
                  for (const event of chunk) {
                    events.push(event)
                    switch (event._tag) {
                      case "TextDelta":
                        if (event.text === "") break
                        if (!separated) out.push(ModelEvent.text(ROUND_SEPARATOR))
                        separated = true
                        textShown = true
                        out.push(event)
                        break
                      case "ReasoningDelta":
                      case "RedactedReasoning":
                      case "KeepAlive":
                        out.push(event)
                        break
                      case "Usage":
                        usage = event.usage
                        break
                      // calls wait for the round's end; the finish is the loop's
                      case "ToolCall":
                      case "Finish":
                        break
                    }
                  }
                  return Chunk.unsafeFromArray(out)
                }

                /** The round ended: the answer's last events, or the host calls started. */
                const roundEnded = (): Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<GatewayError>> => {
                  const answer = foldEvents(events)
                  total = addUsage(total, usage)
                  const host = answer.toolCalls.filter(isHost)
                  const closing = Scope.close(scope, Exit.void)
                  if (host.length === 0 || rounds >= offer.maxRounds) {
                    done = true
                    const out: Array<ModelEvent> = []
                    if (host.length === 0) for (const call of answer.toolCalls) out.push(ModelEvent.toolCall(call))
                    out.push(ModelEvent.usage(total), ModelEvent.finish(host.length > 0 ? "length" : answer.finishReason))
                    return Effect.as(closing, Chunk.unsafeFromArray(out))
                  }
                  const turn = events
                  return Effect.zipRight(
                    closing,
                    Effect.map(Effect.forkIn(runHostCalls(offer, host, facts), requestScope), (fiber) => {
                      waiting = fiber
                      request = nextRequest(request, turn, isHost, [])
                      // the running usage so far, so that a stream cut later still counts it
                      return Chunk.of(ModelEvent.usage(total))
                    })
                  )
                }

                /** The host calls are done: the next round starts with their results. */
                const nextRound = (results: ReadonlyArray<ToolResultPart>) => {
                  const messages = request.messages
                  // the tool turn was appended empty: fill in the results
                  request = { ...request, messages: [...messages.slice(0, -1), { role: "tool", parts: results }] }
                  waiting = undefined
                  rounds++
                  events = []
                  usage = emptyUsage
                  separated = !textShown
                  return Effect.flatMap(Scope.fork(requestScope, ExecutionStrategy.sequential), (roundScope) => {
                    scope = roundScope
                    return Effect.map(Scope.extend(base.start({ ...options, request }), roundScope), (run) => {
                      facts.sessions.push(run.sessionId)
                      pull = run.pull
                      return Chunk.empty<ModelEvent>()
                    })
                  })
                }

                const loopPull: EventPull = Effect.suspend(() => {
                  if (done) return end
                  const fiber = waiting
                  if (fiber !== undefined) {
                    // keep the connection alive while the host calls run
                    return Effect.flatMap(Effect.timeout(Fiber.join(fiber), KEEP_ALIVE_MS), (results) => nextRound(results)).pipe(
                      Effect.catchTag("TimeoutException", () => Effect.succeed(Chunk.of(ModelEvent.keepAlive))),
                      Effect.mapError(Option.some)
                    )
                  }
                  return Effect.matchEffect(pull, {
                    onSuccess: (chunk) => Effect.succeed(shownOf(chunk)),
                    onFailure: (failure) => (Option.isNone(failure) ? roundEnded() : Effect.fail(failure))
                  })
                })

                return { ...first, pull: loopPull }
              })
            )
          )

        return ModelRunner.of({ start, complete })
      }

      const prepare = (run: RunOptions, refinish?: Refinish): Effect.Effect<Prepared, GatewayError> =>
        hostTools.appHasHostTools(run.app.name)
          ? Effect.flatMap(hostTools.offer(run.app.name, run.model, run.request), (offer) => {
              const from = offer !== undefined && refinish !== undefined ? refinish.base() : run.request
              return Effect.map(hostTools.apply(from, offer), (request): Prepared => {
                if (offer === undefined) return { run: request === run.request ? run : { ...run, request }, runner: base }
                const applied = { ...run, request: refinish !== undefined ? refinish.finish(request) : request }
                const facts: LoopFacts = { hostCalls: 0, sessions: [] }
                return { run: applied, runner: loopRunner(offer, facts), facts }
              })
            })
          : Effect.succeed({ run, runner: base })

      const counted = (app: string, model: string, request: CanonicalRequest) =>
        hostTools.appHasHostTools(app) ? Effect.flatMap(hostTools.offer(app, model, request), (offer) => hostTools.apply(request, offer)) : Effect.succeed(request)

      return HostToolLoop.of({ prepare, counted, keepAliveMs: (yield* Settings).streamKeepAliveMs })
    })
  )
}
