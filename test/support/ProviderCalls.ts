import type { Effect, Stream } from "effect"
import type { ModelEvent } from "../../src/domain/Canonical.js"
import type { UpstreamError } from "../../src/domain/Errors.js"
import { drainSource, sourceStream, type Provider, type ProviderCall } from "../../src/providers/Provider.js"

/** A provider's streamed answer to a call, as a Stream (the call made with `stream: true`). */
export const streamOf = (provider: Provider, call: ProviderCall): Stream.Stream<ModelEvent, UpstreamError> =>
  sourceStream(provider.open(call.request.stream ? call : { ...call, request: { ...call.request, stream: true } }))

/** A provider's whole answer to a call (the call made with `stream: false`: one non-streamed upstream call). */
export const wholeOf = (provider: Provider, call: ProviderCall): Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError> =>
  drainSource(provider.open(call.request.stream ? { ...call, request: { ...call.request, stream: false } } : call))
