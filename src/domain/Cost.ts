import type { Price, ProviderConfig } from "../Config.js"
import type { Usage } from "./Canonical.js"
import type { ProviderTarget } from "../providers/Provider.js"

/**
 * What a call cost, in USD, from the price of the model that answered (USD per million tokens):
 * input at `input`, cache reads at `cacheRead` and cache writes at `cacheWrite` (each defaulting
 * to `input`), output (reasoning included) at `output`. Null when the model has no price: an
 * unknown cost, never 0.
 */
export const costOf = (price: Price | undefined, usage: Usage): number | null => {
  if (price === undefined) return null
  // `inputTokens` counts cache reads and writes too
  const plain = Math.max(0, usage.inputTokens - usage.cacheReadTokens - usage.cacheWriteTokens)
  const micro =
    plain * price.input +
    usage.cacheReadTokens * (price.cacheRead ?? price.input) +
    usage.cacheWriteTokens * (price.cacheWrite ?? price.input) +
    usage.outputTokens * price.output
  return micro / 1_000_000
}

/** The price of a target: its model's, else its provider's default, else none. */
export const priceOf = (providers: Readonly<Record<string, ProviderConfig>>, target: ProviderTarget | undefined): Price | undefined =>
  target === undefined ? undefined : (target.modelConfig?.price ?? providers[target.provider]?.price)
