import { Chunk, Context, Effect, Layer, Option, Scope, Stream } from "effect"
import { Settings } from "../Config.js"
import { samplingParamNames, type CanonicalRequest, type ModelEvent, type Sampling } from "../domain/Canonical.js"
import { Errors, toGatewayError, type GatewayError, UpstreamError } from "../domain/Errors.js"
import { Ids } from "../domain/Ids.js"
import { Catalog, type AppSettings, type ResolveOptions } from "./Catalog.js"
import { Limits } from "./Limits.js"
import { neverSent, ProviderClient, type ProviderTarget } from "./ProviderClient.js"

/** A model call that has produced its first event: nothing has been sent to the client yet. */
export interface StartedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  /** sampling params left out because the model does not take them */
  readonly droppedParams: ReadonlyArray<string>
  /** every event, the first included; fails with the protocol-neutral GatewayError */
  readonly events: Stream.Stream<ModelEvent, GatewayError>
}

/** A whole model answer for a caller that does not stream: its events, in order. */
export interface CompletedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  readonly droppedParams: ReadonlyArray<string>
  readonly events: ReadonlyArray<ModelEvent>
}

export interface RunOptions {
  readonly model: string
  readonly request: CanonicalRequest
  readonly app: AppSettings
  /** epoch ms by which the call must be finished */
  readonly deadline: number
  readonly resolve?: ResolveOptions
}

/** The first non-empty chunk of a pull (empty at the end of the stream), failing with the stream's error. */
const firstChunk = <E>(pull: Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<E>>): Effect.Effect<Chunk.Chunk<ModelEvent>, E> =>
  Effect.matchEffect(pull, {
    onFailure: (e) => Option.match(e, { onNone: () => Effect.succeed(Chunk.empty<ModelEvent>()), onSome: (error) => Effect.fail(error) }),
    onSuccess: (chunk) => (Chunk.isEmpty(chunk) ? firstChunk(pull) : Effect.succeed(chunk))
  })

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

/**
 * Runs a canonical request against a model id: resolves aliases, takes a concurrency slot for the
 * scope's lifetime, drops unsupported params, and falls back to the next alias target when a
 * retryable failure happens before the first event. Fails before any output as a GatewayError.
 */
export class ModelRunner extends Context.Tag("gateway/ModelRunner")<
  ModelRunner,
  {
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
      // built only when it happens: constructing an error validates its fields and captures a stack
      const timeout = () => Errors.timeout("timeout", `The request ran past ${config.requestTimeoutMs} ms`)

      // the system prompt that reaches the model: app policy, agent prompt or skill content
      const withSystem = (options: RunOptions): RunOptions => {
        const system = catalog.system(options.model, options.app, options.request.system)
        return system === options.request.system ? options : { ...options, request: { ...options.request, system } }
      }

      const start = (given: RunOptions): Effect.Effect<StartedRun, GatewayError, Scope.Scope> =>
        Effect.gen(function* () {
          const options = withSystem(given)
          const resolved = yield* catalog.resolve(options.model, options.app, options.resolve)
          yield* limits.modelSlot
          const remaining = options.deadline - Date.now()
          if (remaining <= 0) return yield* timeout()
          let lastError: UpstreamError | undefined
          for (const target of resolved.targets) {
            const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
            const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, neverSent[target.providerType])
            // an absolute deadline for the whole call, output included
            const upstream = providers.stream({ target, request, deadline: options.deadline }).pipe(
              Stream.interruptWhen(Effect.sleep(Math.max(1, options.deadline - Date.now())).pipe(Effect.zipRight(Effect.failSync(timeout))))
            )
            // pull up to the first non-empty chunk: failing here may still fall back to the next target
            const pull = yield* Stream.toPull(upstream)
            const attempt = yield* firstChunk(pull).pipe(Effect.either)
            if (attempt._tag === "Right") {
              const events = Stream.concat(Stream.fromChunk(attempt.right), Stream.repeatEffectChunkOption(pull)).pipe(
                Stream.mapError((e) => toGatewayError(e))
              )
              return { target, sessionId: Ids.session(), droppedParams: dropped, events }
            }
            const error = attempt.left
            if (error._tag === "GatewayError") return yield* error
            if (!error.retryable) return yield* toGatewayError(error)
            lastError = error
          }
          return yield* toGatewayError(lastError ?? new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" }))
        })

      // no Scope and no timer fiber here: the slot is held with acquireUseRelease and the provider
      // enforces the deadline itself (an AbortSignal timer on the upstream request)
      const complete = (given: RunOptions): Effect.Effect<CompletedRun, GatewayError> => {
        const options = withSystem(given)
        return Effect.flatMap(catalog.resolve(options.model, options.app, options.resolve), (resolved) =>
          limits.withModelSlot(
            Effect.suspend(() => {
              if (options.deadline - Date.now() <= 0) return Effect.fail(timeout())
              const attempt = (index: number, lastError: UpstreamError | undefined): Effect.Effect<CompletedRun, GatewayError> => {
                const target = resolved.targets[index]
                if (target === undefined) {
                  return Effect.fail(toGatewayError(lastError ?? new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" })))
                }
                const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
                const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, neverSent[target.providerType])
                return Effect.matchEffect(providers.complete({ target, request, deadline: options.deadline }), {
                  onSuccess: (events): Effect.Effect<CompletedRun, GatewayError> =>
                    Effect.succeed({ target, sessionId: Ids.session(), droppedParams: dropped, events }),
                  onFailure: (error: UpstreamError): Effect.Effect<CompletedRun, GatewayError> =>
                    error.retryable ? attempt(index + 1, error) : Effect.fail(toGatewayError(error))
                })
              }
              return attempt(0, undefined)
            })
          )
        )
      }

      return ModelRunner.of({ start, complete })
    })
  )
}
