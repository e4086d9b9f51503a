/**
 * Every property test runs from one fixed seed, so `npm test` is deterministic: a counterexample
 * found once is found on every run and every machine. To explore further, run with another seed,
 * e.g. `FAST_CHECK_SEED=12345 npx vitest run --config test/vitest.config.ts test/reliability`;
 * a failure prints the seed and path that replay it.
 */
import fc from "fast-check"

const seed = Number(process.env.FAST_CHECK_SEED ?? 20261122)
if (!Number.isSafeInteger(seed)) throw new Error(`FAST_CHECK_SEED must be an integer, got ${process.env.FAST_CHECK_SEED}`)
fc.configureGlobal({ seed })
