import { Chunk, Context, Effect, Exit, Option, Scope, Stream } from "effect"
import type { ModelConfig, ProviderConfig, ProviderType } from "../Config.js"
import type { CanonicalRequest, ModelEvent } from "../domain/Canonical.js"
import { UpstreamError } from "../domain/Errors.js"

/** One resolved model to call: a configured provider and the model name sent upstream. */
export interface ProviderTarget {
  /** key of `providers` in the config */
  readonly provider: string
  readonly providerType: ProviderType
  /** model name passed upstream as written */
  readonly model: string
  /** `<provider>/<model>` */
  readonly id: string
  readonly variant?: string
  /** reasoning effort sent upstream (from the variant) */
  readonly reasoningEffort?: string
  /** extra upstream request fields (from the variant) */
  readonly params?: { readonly [key: string]: unknown }
  readonly modelConfig?: ModelConfig
  /** which of the provider's `apiKeys` the call uses (none: its `apiKey`) */
  readonly keyIndex?: number
}

/** A target as health, status and metrics name it: `<provider>/<model>`, and the key's index when the provider has several. */
export const targetName = (target: ProviderTarget): string => (target.keyIndex === undefined ? target.id : `${target.id}#key${target.keyIndex}`)

/** One call of a model: the target and the request as it should reach the provider. */
export interface ProviderCall {
  readonly target: ProviderTarget
  /** `request.stream` false: the caller reads the answer whole (the provider may ask for it whole) */
  readonly request: CanonicalRequest
  /** epoch ms by which the call must be finished, output included */
  readonly deadline: number
}

/** The next events of an answer, one chunk per pull; `Option.none()` after the last. */
export type Pull<E> = Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<E>>

/**
 * A model call's answer, read pull by pull. The first pull sends the request. `close` ends the
 * exchange whether or not the answer was read to its end (an unfinished one is aborted); it may be
 * called more than once.
 */
export interface AnswerSource {
  readonly pull: Pull<UpstreamError>
  readonly close: Effect.Effect<void>
}

/**
 * A configured provider instance. Its one method opens a call and hands back the answer as one
 * source of canonical events. For a request with `stream: false` the provider may make a
 * non-streamed upstream call: its events then come in one chunk, and the caller folds them as it
 * would fold a streamed answer. Every source fails with `timeout` at the call's deadline (the HTTP
 * providers' abort timer covers the whole exchange; a Stream-built source gets a timer), and only
 * with `UpstreamError`.
 */
export interface Provider {
  readonly open: (call: ProviderCall) => AnswerSource
  /**
   * The input tokens the upstream itself counts for this call's request (an upstream with a
   * count endpoint: the native Messages API). Absent: the gateway estimates.
   */
  readonly countTokens?: (call: ProviderCall) => Effect.Effect<number, UpstreamError>
}

/** Builds a provider instance of one type from its config entry. */
export interface ProviderFactory {
  readonly type: ProviderType
  readonly make: (name: string, config: ProviderConfig) => Effect.Effect<Provider>
  /**
   * Sampling params (wire names) this type's upstream would refuse for this request: those the
   * type never sends, and those refused for this request's settings. Always dropped and listed.
   */
  readonly refusedParams: (target: ProviderTarget, request: CanonicalRequest) => ReadonlyArray<string>
}

/** Registry of provider factories by type; each provider type adds one (src/App.ts lists them). */
export class ProviderFactories extends Context.Tag("gateway/ProviderFactories")<ProviderFactories, ReadonlyMap<ProviderType, ProviderFactory>>() {}

const finished = Effect.fail(Option.none())

/** A source whose whole answer is one effect (a non-streamed upstream call): its events in one chunk. */
export const wholeSource = (answer: Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError>): AnswerSource => {
  let read = false
  return {
    pull: Effect.suspend(() => {
      if (read) return finished
      read = true
      return Effect.mapBoth(answer, { onSuccess: Chunk.unsafeFromArray, onFailure: Option.some })
    }),
    close: Effect.void
  }
}

const pastDeadline = (call: ProviderCall) => new UpstreamError({ reason: "timeout", provider: call.target.provider, message: "no answer in time" })

/**
 * A source read from a Stream (the mock provider, test doubles), failing `timeout` at the call's
 * deadline. The stream runs in a scope of its own, closed by `close`.
 */
export const streamSource = (stream: Stream.Stream<ModelEvent, UpstreamError>, call: ProviderCall): AnswerSource => {
  let scope: Scope.CloseableScope | undefined
  let pull: Pull<UpstreamError> | undefined
  const timed = Stream.interruptWhen(stream, Effect.suspend(() => Effect.sleep(Math.max(1, call.deadline - Date.now()))).pipe(Effect.zipRight(Effect.failSync(() => pastDeadline(call)))))
  const open = Effect.uninterruptible(
    Effect.flatMap(Scope.make(), (made) => {
      scope = made
      return Effect.map(Scope.extend(Stream.toPull(timed), made), (opened) => (pull = opened))
    })
  )
  return {
    pull: Effect.suspend(() => (pull !== undefined ? pull : Effect.flatMap(open, (opened) => opened))),
    close: Effect.suspend(() => (scope === undefined ? Effect.void : Scope.close(scope, Exit.void)))
  }
}

/** A source as a Stream (closed when the stream ends, fails or is interrupted). */
export const sourceStream = (source: AnswerSource): Stream.Stream<ModelEvent, UpstreamError> =>
  Stream.repeatEffectChunkOption(source.pull).pipe(Stream.ensuring(source.close))

/** Every event of a source, read to its end; closed after. */
export const drainSource = (source: AnswerSource): Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError> =>
  Effect.ensuring(drainPull(source.pull), source.close)

/** Every event of a pull, read to its end, failing with its failure. */
export const drainPull = <E>(pull: Pull<E>): Effect.Effect<ReadonlyArray<ModelEvent>, E> => {
  const events: Array<ModelEvent> = []
  const loop: Effect.Effect<ReadonlyArray<ModelEvent>, E> = Effect.matchEffect(pull, {
    onSuccess: (chunk) => {
      for (const event of chunk) events.push(event)
      return loop
    },
    onFailure: (failure) => (Option.isNone(failure) ? Effect.succeed(events) : Effect.fail(failure.value))
  })
  return loop
}
