import { Chunk, Clock, Context, Effect, Exit, Layer, Option, Scope, type Tracer } from "effect"
import { Settings } from "../../Config.js"
import { emptyUsage, samplingParamNames, type CanonicalRequest, type ModelEvent, type Sampling } from "../../domain/Canonical.js"
import { Errors, toGatewayError, type GatewayError, UpstreamError } from "../../domain/Errors.js"
import { Ids } from "../../domain/Ids.js"
import { drainPull, type Pull } from "../../providers/Provider.js"
import { tracingEnabled } from "../../Telemetry.js"
import { Catalog, type AppSettings, type ResolveOptions } from "../routing/Catalog.js"
import * as Call from "./Call.js"
import { Limits } from "./Limits.js"
import { Metrics } from "../ops/Metrics.js"
import { costOf, priceOf } from "../../domain/Cost.js"
import { ProviderClient, type ProviderTarget } from "./ProviderClient.js"
import { UsageLog, type Caller } from "../usage/Usage.js"
import { DEFAULT_OUTPUT_CAP, Quota, type Reservation } from "../quota/Quota.js"
import { Health } from "../routing/Health.js"
import { Router, type Plan } from "../routing/Router.js"
import type { RateLimitView } from "../../domain/Quota.js"
import { estimateTokens, geminiCalibration, messagesCalibration } from "../../domain/TokenEstimate.js"

/** The next events of a run, one chunk per pull; `Option.none()` after the last. */
export type EventPull = Pull<GatewayError>

/** A model call that has produced its first event: nothing has been sent to the client yet. */
export interface StartedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  /** sampling params left out because the model does not take them */
  readonly droppedParams: ReadonlyArray<string>
  /**
   * every event, the first included, failing with the protocol-neutral GatewayError: read it to
   * the socket with no stream stages between (or as a Stream where runs are merged), once
   */
  readonly pull: EventPull
  /** the rate limits that bound the call, for the answer's headers */
  readonly rateLimit?: RateLimitView
}

/** A started run whose events are these, in one chunk (an answer held back and replayed). */
export const replayed = (run: StartedRun, events: ReadonlyArray<ModelEvent>): StartedRun => {
  let left: Chunk.Chunk<ModelEvent> | undefined = Chunk.unsafeFromArray([...events])
  const pull: EventPull = Effect.suspend(() => {
    if (left === undefined) return Effect.fail(Option.none())
    const chunk = left
    left = undefined
    return Effect.succeed(chunk)
  })
  return { ...run, pull }
}

/** A whole model answer for a caller that does not stream: its events, in order. */
export interface CompletedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  readonly droppedParams: ReadonlyArray<string>
  readonly events: ReadonlyArray<ModelEvent>
  readonly rateLimit?: RateLimitView
}

export interface RunOptions {
  /** who calls, for the usage record (no record without it) */
  readonly caller?: Caller
  readonly model: string
  readonly request: CanonicalRequest
  readonly app: AppSettings
  /** epoch ms by which the call must be finished */
  readonly deadline: number
  readonly resolve?: ResolveOptions
}

/** The first non-empty chunk of a pull (empty at the end of the stream), failing with the stream's error. */
const firstChunk = <E>(pull: Pull<E>): Effect.Effect<Chunk.Chunk<ModelEvent>, E> =>
  Effect.matchEffect(pull, {
    onFailure: (e) => Option.match(e, { onNone: () => Effect.succeed(Chunk.empty<ModelEvent>()), onSome: (error) => Effect.fail(error) }),
    onSuccess: (chunk) => (Chunk.isEmpty(chunk) ? firstChunk(pull) : Effect.succeed(chunk))
  })

/** What a caller reads of an answer before anything reaches its client. */
type Read = (pull: Pull<UpstreamError>) => Effect.Effect<Chunk.Chunk<ModelEvent>, UpstreamError>

/** All of an answer, for a caller that does not stream. */
const readWhole: Read = (pull) => Effect.map(drainPull(pull), Chunk.unsafeFromArray)

/** Which sampling params to leave out for a target, and the request without them. */
export const dropUnsupported = (
  request: CanonicalRequest,
  rejects: ReadonlyArray<string>,
  enabled: boolean,
  never: ReadonlyArray<string> = []
): { readonly request: CanonicalRequest; readonly dropped: ReadonlyArray<string> } => {
  if (!enabled) rejects = never
  else if (never.length > 0) rejects = [...rejects, ...never]
  if (rejects.length === 0) return { request, dropped: [] }
  const dropped: Array<string> = []
  const sampling: Record<string, unknown> = { ...request.sampling }
  for (const [key, wire] of Object.entries(samplingParamNames)) {
    if (sampling[key] !== undefined && rejects.includes(wire)) {
      delete sampling[key]
      dropped.push(wire)
    }
  }
  return dropped.length === 0 ? { request, dropped } : { request: { ...request, sampling: sampling as Sampling }, dropped }
}

/** How a caller takes an answer: streamed or whole, what it reads before any output, and what it makes of it. */
interface Mode<A> {
  readonly stream: boolean
  readonly read: Read
  readonly answer: (call: Call.Call, answering: Call.Answering, events: Chunk.Chunk<ModelEvent>) => A
}

const msSince = (t0: number) => Math.round((performance.now() - t0) * 100) / 100

// one effect for every call that no limit applies to
const noReservation: Effect.Effect<Reservation | undefined> = Effect.succeed(undefined)

/**
 * Runs a canonical request against a model id: resolves aliases, takes a concurrency slot, drops
 * unsupported params, and falls back to the next alias target when a retryable failure happens
 * before the first event. Fails before any output as a GatewayError. One path serves both
 * callers: `start` hands the events on as they come, `complete` folds the same events whole.
 */
export class ModelRunner extends Context.Tag("gateway/ModelRunner")<
  ModelRunner,
  {
    /** the run once its first events exist; the call is released when the scope closes */
    readonly start: (options: RunOptions) => Effect.Effect<StartedRun, GatewayError, Scope.Scope>
    /** the whole answer at once (same targets, fallbacks and limits as `start`) */
    readonly complete: (options: RunOptions) => Effect.Effect<CompletedRun, GatewayError>
  }
>() {
  static readonly layer = Layer.effect(
    ModelRunner,
    Effect.gen(function* () {
      const config = yield* Settings
      const catalog = yield* Catalog
      const limits = yield* Limits
      const providers = yield* ProviderClient
      const usageLog = yield* UsageLog
      const metrics = yield* Metrics
      const quota = yield* Quota
      const health = yield* Health
      const router = yield* Router
      const tracing = tracingEnabled(config)

      /** The usage record and metrics of a finished, failed or cancelled call: once, read off the phase it is settled from. */
      const record = (call: Call.Call, status: string) => {
        const phase = Call.settle(call)
        if (phase === undefined) return
        const { options } = call
        const caller = options.caller
        const target = Call.targetOf(phase)
        const reservation = Call.reservationOf(phase)
        const answering = phase._tag === "Answering" ? phase : undefined
        const usage = answering?.usage ?? emptyUsage
        const ttftMs = answering?.ttftMs
        const costUsd = costOf(priceOf(config.providers, target), usage)
        if (reservation !== undefined) quota.settle(reservation, { tokens: usage.inputTokens + usage.outputTokens, usd: costUsd })
        if (caller === undefined) return
        const latencyMs = msSince(call.t0)
        metrics.modelCall({
          family: caller.protocol,
          route: caller.route,
          // a requested name that resolved to nothing is not a label: any string could be one
          model: target?.id ?? "unresolved",
          provider: target?.provider ?? "",
          status,
          tokens: { input: usage.inputTokens, output: usage.outputTokens, cacheRead: usage.cacheReadTokens, cacheWrite: usage.cacheWriteTokens, reasoning: usage.reasoningTokens },
          latencyMs,
          app: options.app.name,
          costUsd,
          ...(ttftMs !== undefined ? { ttftMs } : {})
        })
        if (!usageLog.enabled) return
        usageLog.record({
          time: call.at,
          app: options.app.name,
          ...(caller.user !== undefined ? { user: caller.user } : options.request.user !== undefined ? { user: options.request.user } : {}),
          keyId: caller.keyId,
          protocol: caller.protocol,
          route: caller.route,
          requestedModel: options.model.slice(0, 200),
          ...(target !== undefined ? { model: target.id, provider: target.provider, ...(target.keyIndex !== undefined ? { keyIndex: target.keyIndex } : {}) } : {}),
          ...(answering !== undefined ? { sessionId: answering.sessionId } : {}),
          ...(caller.session !== undefined ? { clientSession: caller.session } : {}),
          ...(caller.agent !== undefined ? { agent: caller.agent } : {}),
          ...(caller.parentAgent !== undefined ? { parentAgent: caller.parentAgent } : {}),
          status,
          usage,
          costUsd,
          latencyMs,
          ...(ttftMs !== undefined ? { ttftMs } : {})
        })
      }
      // built only when it happens: constructing an error validates its fields and captures a stack
      const timeout = () => Errors.timeout("timeout", `The request ran past ${config.requestTimeoutMs} ms`)
      const noTarget = () => new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" })

      // the system prompt that reaches the model: app policy, agent prompt or skill content
      const withSystem = (options: RunOptions): RunOptions => {
        const system = catalog.system(options.model, options.app, options.request.system)
        return system === options.request.system ? options : { ...options, request: { ...options.request, system } }
      }

      /** Close an exchange (and end its span). */
      const closeExchange = (exchange: Call.Exchange, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
        const { source, span } = exchange
        if (span === undefined) return source.close
        return Effect.zipRight(source.close, Clock.clockWith((clock) => Effect.sync(() => span.end(clock.unsafeCurrentTimeNanos(), exit))))
      }

      /** Everything a call holds, let go: the slot, a record if none was made, the answer in flight and the exchange. */
      const release = (call: Call.Call): Effect.Effect<void> =>
        Effect.suspend(() => {
          const held = Call.held(call.state)
          if (held === undefined) return Effect.void
          if (Call.holdsSlot(held)) limits.releaseModelSlot()
          record(call, "cancelled")
          Call.release(call)
          if (held._tag === "Answering") health.done(held.target, performance.now() - held.attemptT0)
          return held._tag === "Attempting" || held._tag === "Answering" ? closeExchange(held, Exit.void) : Effect.void
        })

      /** A span per provider exchange when tracing: `provider.stream` or `provider.complete`. */
      const spanFor = (call: Call.Call, target: ProviderTarget): Effect.Effect<Tracer.Span> =>
        Effect.makeSpan(call.options.request.stream ? "provider.stream" : "provider.complete", {
          kind: "client",
          attributes: { "gateway.provider": target.provider, "gateway.model": target.id, "gateway.provider_type": target.providerType }
        })

      /**
       * The one fallback loop: each target of the plan in turn, from `from`, until one gives what the
       * caller reads before any output (`mode.read`: the first events of a streamed answer, or all of
       * a whole one).
       */
      const attempt = <A>(
        call: Call.Call,
        mode: Mode<A>,
        plan: Plan,
        index: number,
        from: Call.Admitted | Call.Missed,
        lastError: UpstreamError | undefined
      ): Effect.Effect<A, GatewayError> => {
        const target = plan.targets[index]
        const { options } = call
        if (target === undefined) return Effect.fail(toGatewayError(lastError ?? noTarget()))
        // past the deadline no other target can answer in time
        if (index > 0 && Date.now() >= options.deadline) return Effect.fail(timeout())
        const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
        const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, providers.refusedParams(target, options.request))
        const exchange = (span: Tracer.Span | undefined) =>
          Effect.suspend(() => {
            health.take(target)
            const attemptT0 = performance.now()
            const source = providers.open({ target, request, deadline: options.deadline })
            const attempting = Call.attempting(from, target, dropped, source, span, attemptT0)
            Call.enter(call, from, attempting)
            const answered = Effect.map(mode.read(source.pull), (events) => {
              const answering = Call.answered(attempting, Ids.session(), mode.stream ? msSince(call.t0) : undefined)
              Call.enter(call, attempting, answering)
              health.succeeded(target, performance.now() - attemptT0)
              router.answered(plan, target)
              return mode.answer(call, answering, events)
            })
            return Effect.catchAll(
              Effect.onInterrupt(answered, () => Effect.sync(() => health.released(target))),
              (error) => {
                const missed = Call.missed(attempting)
                // a call released meanwhile had its exchange closed by `release`
                const close = Effect.suspend(() => (Call.enter(call, attempting, missed) ? closeExchange(attempting, Exit.fail(error)) : Effect.void))
                return Effect.zipRight(
                  Effect.zipRight(health.failed(target, error), close),
                  error.retryable ? attempt(call, mode, plan, index + 1, missed, error) : Effect.fail(toGatewayError(error))
                )
              }
            )
          })
        return tracing ? Effect.flatMap(spanFor(call, target), exchange) : exchange(undefined)
      }

      /** What a call may take, reserved before it runs: its input estimate and output cap, priced as its first target. */
      const estimate = (call: Call.Call, first: ProviderTarget | undefined) => () => {
        const { request } = call.options
        const input = estimateTokens(request, first?.providerType === "gemini" ? geminiCalibration : messagesCalibration)
        const output = request.maxOutputTokens ?? DEFAULT_OUTPUT_CAP
        const usd = costOf(priceOf(config.providers, first), { ...emptyUsage, inputTokens: input, outputTokens: output }) ?? 0
        return { tokens: input + output, usd }
      }

      /** Admit the call against its app's and key's limits: the reservation it holds until it is recorded. */
      const admit = (call: Call.Call, first: ProviderTarget | undefined): Effect.Effect<Reservation | undefined, GatewayError> => {
        const { app, caller } = call.options
        const keyId = caller?.keyId ?? "none"
        if (!quota.applies(app.name, keyId)) return noReservation
        return quota.admit(app.name, keyId, estimate(call, first))
      }

      /** Resolve, take a slot, admit and open the first target that answers: what the mode makes of it. */
      const open = <A>(call: Call.Call, mode: Mode<A>): Effect.Effect<A, GatewayError> =>
        Effect.flatMap(catalog.resolve(call.options.model, call.options.app, call.options.resolve), (resolved) =>
          Effect.flatMap(limits.takeModelSlot, () => {
            const slotted = Call.admitted(undefined)
            Call.enter(call, Call.resolving, slotted)
            return Effect.flatMap(admit(call, resolved.targets[0]), (reservation) => {
              const admitted = Call.admitted(reservation)
              Call.enter(call, slotted, admitted)
              if (call.options.deadline - Date.now() <= 0) return Effect.fail(timeout())
              // by the alias's strategy or the conversation; cooled targets last, the one whose cooldown ends first first
              return Effect.flatMap(router.plan(resolved, call.opening), (plan) => attempt(call, mode, plan, 0, admitted, undefined))
            })
          })
        ).pipe(Effect.tapError((error) => Effect.sync(() => record(call, error.code))))

      /**
       * The call's events from the first on, errors as GatewayErrors; the usage record is made when
       * they end or fail (or as cancelled when the call is released before that).
       */
      const tracked = (call: Call.Call, answering: Call.Answering, first: Chunk.Chunk<ModelEvent>): EventPull => {
        const seen = (chunk: Chunk.Chunk<ModelEvent>) => {
          for (const event of chunk) if (event._tag === "Usage") answering.usage = event.usage
          return chunk
        }
        const next: EventPull = Effect.mapBoth(answering.source.pull, {
          onSuccess: seen,
          onFailure: (failure) => {
            if (Option.isNone(failure)) {
              record(call, "ok")
              return Option.none()
            }
            const error = toGatewayError(failure.value)
            record(call, error.code)
            return Option.some(error)
          }
        })
        let waiting: Chunk.Chunk<ModelEvent> | undefined = first
        return Effect.suspend(() => {
          if (waiting === undefined) return next
          const chunk = waiting
          waiting = undefined
          return Effect.succeed(seen(chunk))
        })
      }

      const streaming: Mode<StartedRun> = {
        stream: true,
        read: firstChunk,
        answer: (call, answering, first) => {
          const view = answering.reservation?.view
          return {
            target: answering.target,
            sessionId: answering.sessionId,
            droppedParams: answering.dropped,
            pull: tracked(call, answering, first),
            ...(view !== undefined ? { rateLimit: view } : {})
          }
        }
      }

      const whole: Mode<CompletedRun> = {
        stream: false,
        read: readWhole,
        answer: (call, answering, events) => {
          for (const event of events) if (event._tag === "Usage") answering.usage = event.usage
          record(call, "ok")
          const view = answering.reservation?.view
          return {
            target: answering.target,
            sessionId: answering.sessionId,
            droppedParams: answering.dropped,
            events: Chunk.toReadonlyArray(events),
            ...(view !== undefined ? { rateLimit: view } : {})
          }
        }
      }

      /**
       * The call, its request as the mode asks for it: streamed from the upstream, or whole. A
       * client's session (Claude Code's, Codex's) names the conversation that affinity keeps on one target.
       */
      const newCall = (given: RunOptions, stream: boolean): Call.Call => {
        const session = given.caller?.session
        const conversation = session ?? given.request.conversation
        const options =
          given.request.stream === stream && given.request.conversation === conversation
            ? given
            : { ...given, request: { ...given.request, stream, ...(conversation !== undefined ? { conversation } : {}) } }
        return Call.make(withSystem(options), options.request)
      }

      const start = (given: RunOptions): Effect.Effect<StartedRun, GatewayError, Scope.Scope> =>
        Effect.flatMap(Effect.scope, (scope) => {
          const call = newCall(given, streaming.stream)
          return Effect.zipRight(Scope.addFinalizer(scope, release(call)), open(call, streaming))
        })

      // nothing is held before `open` takes the slot, so the call needs no acquire step of its own
      const complete = (given: RunOptions): Effect.Effect<CompletedRun, GatewayError> =>
        Effect.suspend(() => {
          const call = newCall(given, whole.stream)
          return Effect.ensuring(open(call, whole), release(call))
        })

      return ModelRunner.of({ start, complete })
    })
  )
}
