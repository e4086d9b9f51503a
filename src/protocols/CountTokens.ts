import { Effect, Option } from "effect"
import type { CanonicalRequest } from "../domain/Canonical.js"
import type { ResolvedModel } from "../services/routing/Catalog.js"
import { ProviderClient } from "../services/runner/ProviderClient.js"

/** how long a count may wait for the upstream before the estimate answers */
export const UPSTREAM_COUNT_MS = 10_000

/**
 * Input token counts for `POST /v1/messages/count_tokens` and `:countTokens`: the upstream's own
 * count when the model's first target can count (a native Messages upstream), for the request as
 * the gateway would send it there; the gateway's estimate when it cannot, or when the upstream
 * fails, is slow or answers something else. The client never sees the difference but the number.
 */
export const makeTokenCounter = Effect.map(
  ProviderClient,
  (client) =>
    (resolved: ResolvedModel, request: CanonicalRequest, estimate: () => number, deadline: number): Effect.Effect<number> => {
      const target = resolved.targets[0]
      if (target === undefined) return Effect.sync(estimate)
      const call = { target, request: request.stream ? { ...request, stream: false } : request, deadline: Math.min(deadline, Date.now() + UPSTREAM_COUNT_MS) }
      return client.countTokens(call).pipe(
        Effect.map(Option.getOrElse(estimate)),
        Effect.orElseSucceed(estimate)
      )
    }
)
