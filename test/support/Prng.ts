/**
 * mulberry32: a tiny seeded PRNG, uniform in [0, 1). The same seed gives the same sequence on
 * every run and every machine, so a test that draws from it is deterministic: a statistical
 * assertion that passes once passes always (the tolerances stated beside each one say how far
 * from the expectation a correct implementation may land for *any* seed, so that changing the
 * seed would not make them flaky either).
 */
export const mulberry32 = (seed: number): (() => number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** The seed the routing tests use (the project's fast-check seed, for one number to remember). */
export const ROUTING_SEED = 20261122
