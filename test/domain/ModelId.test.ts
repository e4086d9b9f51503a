import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { globCapture, globMatch, parseModelId, pickVariant, reasoningLevels, splitProvider } from "../../src/domain/ModelId.js"

/** One character: mostly any grapheme, often one of the characters the id syntax cares about. */
const unit = (specials: ReadonlyArray<string>) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 1 }) },
    { weight: 2, arbitrary: fc.constantFrom(...specials) }
  )

const without = (chars: string) => (s: string) => ![...chars].some((c) => s.includes(c))

/** Provider names: no `/` and no `#` (the config refuses them). */
const providerName = fc.string({ unit: unit(["a", "-", ".", "*"]), minLength: 1, maxLength: 12 }).filter(without("/#"))
/** Model names: may hold `/`, never `#`. */
const modelName = fc.string({ unit: unit(["/", "a", "-", ".", ":"]), minLength: 1, maxLength: 16 }).filter(without("#"))
const variantName = fc.string({ unit: unit(["a", "-", "/"]), minLength: 1, maxLength: 8 }).filter(without("#"))
const noStar = (s: string) => !s.includes("*")

/** The reference: a glob as an anchored regex over UTF-16 code units, `*` any run (newlines included). */
const globRegex = (pattern: string) =>
  new RegExp("^" + pattern.split("*").map((p) => p.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&")).join("[\\s\\S]*") + "$")

describe("parseModelId", () => {
  it("splits <provider>/<model>#<variant> into the base and the variant", () => {
    fc.assert(
      fc.property(providerName, modelName, variantName, (p, m, v) => {
        expect(parseModelId(`${p}/${m}#${v}`)).toEqual({ base: `${p}/${m}`, variant: v })
      })
    )
  })

  it("an id without # is all base; a trailing # is no variant", () => {
    fc.assert(
      fc.property(providerName, modelName, (p, m) => {
        expect(parseModelId(`${p}/${m}`)).toEqual({ base: `${p}/${m}` })
        expect(parseModelId(`${p}/${m}#`)).toEqual({ base: `${p}/${m}` })
      })
    )
  })

  it("splits at the last #, and base + # + variant gives the id back", () => {
    fc.assert(
      fc.property(fc.string({ unit: unit(["#", "/"]) }), (id) => {
        const parsed = parseModelId(id)
        expect(parsed.variant === undefined || !parsed.variant.includes("#")).toBe(true)
        expect(parsed.variant).not.toBe("")
        const back = parsed.variant === undefined ? parsed.base : `${parsed.base}#${parsed.variant}`
        expect(id === back || id === `${back}#`).toBe(true)
      })
    )
  })
})

describe("splitProvider", () => {
  it("round-trips <provider>/<model>, the model keeping its own slashes", () => {
    fc.assert(
      fc.property(providerName, modelName, (p, m) => {
        expect(splitProvider(`${p}/${m}`)).toEqual({ provider: p, model: m })
      })
    )
  })

  it("any split it returns joins back to its input, with a non-empty slash-free provider and a non-empty model", () => {
    fc.assert(
      fc.property(fc.string({ unit: unit(["/", "a"]) }), (s) => {
        const split = splitProvider(s)
        if (split === undefined) {
          expect(s.indexOf("/") <= 0 || s.indexOf("/") === s.length - 1).toBe(true)
        } else {
          expect(`${split.provider}/${split.model}`).toBe(s)
          expect(split.provider).not.toBe("")
          expect(split.provider.includes("/")).toBe(false)
          expect(split.model).not.toBe("")
        }
      })
    )
  })

  it("refuses ids without a provider or a model", () => {
    expect(splitProvider("gpt")).toBeUndefined()
    expect(splitProvider("/gpt")).toBeUndefined()
    expect(splitProvider("openai/")).toBeUndefined()
    expect(splitProvider("openai/org/model")).toEqual({ provider: "openai", model: "org/model" })
  })
})

describe("globCapture", () => {
  const text = fc.string({ unit: unit(["a", "-", "/", "$", "&"]), maxLength: 10 })

  it("captures what the star stands for", () => {
    fc.assert(
      fc.property(text.filter(noStar), text.filter(noStar), fc.string({ unit: unit(["a", "*", "-"]), maxLength: 10 }), (prefix, suffix, x) => {
        expect(globCapture(`${prefix}*${suffix}`, `${prefix}${x}${suffix}`)).toBe(x)
      })
    )
  })

  it("a pattern without a star matches only itself, capturing nothing", () => {
    fc.assert(
      fc.property(text.filter(noStar), text, (pattern, value) => {
        expect(globCapture(pattern, pattern)).toBe("")
        if (value !== pattern) expect(globCapture(pattern, value)).toBeUndefined()
      })
    )
  })

  it("agrees with the regex reference on whether a one-star pattern matches", () => {
    const small = fc.string({ unit: fc.constantFrom("a", "b"), maxLength: 6 })
    fc.assert(
      fc.property(small, small, small, (prefix, suffix, value) => {
        const pattern = `${prefix}*${suffix}`
        expect(globCapture(pattern, value) !== undefined).toBe(globRegex(pattern).test(value))
      }),
      { numRuns: 500 }
    )
  })
})

describe("globMatch", () => {
  it("agrees with a regex reference on a small alphabet (many matches)", () => {
    const pattern = fc.string({ unit: fc.constantFrom("a", "b", "*"), maxLength: 8 })
    const value = fc.string({ unit: fc.constantFrom("a", "b"), maxLength: 8 })
    fc.assert(
      fc.property(pattern, value, (p, v) => {
        expect(globMatch(p, v)).toBe(globRegex(p).test(v))
      }),
      { numRuns: 2000 }
    )
  })

  it("agrees with a regex reference on regex metacharacters, newlines and astral characters", () => {
    const chars = ["a", ".", "*", "\\", "(", "$", "^", "?", "+", "[", "\n", "😀", "/"]
    const pattern = fc.string({ unit: fc.constantFrom(...chars), maxLength: 8 })
    const value = fc.string({ unit: fc.constantFrom(...chars.filter((c) => c !== "*")), maxLength: 8 })
    fc.assert(
      fc.property(pattern, value, (p, v) => {
        expect(globMatch(p, v)).toBe(globRegex(p).test(v))
      }),
      { numRuns: 1000 }
    )
  })

  it("matches every value made by filling each star of the pattern", () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: unit(["a", "-", "/"]), maxLength: 5 }).filter(noStar), { minLength: 1, maxLength: 5 }),
        fc.array(fc.string({ unit: unit(["a", "*", "/"]), maxLength: 5 }), { minLength: 4, maxLength: 4 }),
        (literals, fills) => {
          const pattern = literals.join("*")
          const value = literals.reduce((acc, lit, i) => (i === 0 ? lit : `${acc}${fills[(i - 1) % fills.length]}${lit}`), "")
          expect(globMatch(pattern, value)).toBe(true)
        }
      )
    )
  })
})

describe("pickVariant", () => {
  const levelLike = fc.oneof(fc.constantFrom(...reasoningLevels), fc.constantFrom("High", "LOW", "turbo", "fast", "x"))
  const variants = fc.uniqueArray(levelLike, { maxLength: 6 })
  const rank = (name: string) => reasoningLevels.indexOf(name.toLowerCase() as (typeof reasoningLevels)[number])

  it("returns the level itself when it is one of the variants", () => {
    fc.assert(
      fc.property(variants, levelLike, fc.boolean(), (vs, level, nearestAbove) => {
        fc.pre(vs.includes(level))
        expect(pickVariant(vs, level, nearestAbove)).toBe(level)
      })
    )
  })

  it("without nearestAbove, picks nothing unless the name matches exactly", () => {
    fc.assert(
      fc.property(variants, levelLike, (vs, level) => {
        fc.pre(!vs.includes(level))
        expect(pickVariant(vs, level, false)).toBeUndefined()
      })
    )
  })

  it("with nearestAbove, picks the lowest-ranked variant at or above the level, else the highest", () => {
    fc.assert(
      fc.property(variants, levelLike, (vs, level) => {
        fc.pre(!vs.includes(level))
        const picked = pickVariant(vs, level, true)
        const ranks = vs.map(rank).filter((r) => r >= 0)
        if (ranks.length === 0) {
          expect(picked).toBeUndefined()
          return
        }
        expect(picked).toBeDefined()
        expect(vs).toContain(picked)
        const wanted = rank(level)
        const above = ranks.filter((r) => r >= wanted)
        const expectedRank = wanted >= 0 && above.length > 0 ? Math.min(...above) : Math.max(...ranks)
        expect(rank(picked!)).toBe(expectedRank)
      }),
      { numRuns: 500 }
    )
  })

  it("examples", () => {
    expect(pickVariant(["low", "high"], "medium", true)).toBe("high")
    expect(pickVariant(["low", "high"], "max", true)).toBe("high")
    expect(pickVariant(["low", "high"], "medium", false)).toBeUndefined()
    expect(pickVariant(["low", "turbo"], "bogus", true)).toBe("low")
    expect(pickVariant([], "high", true)).toBeUndefined()
    expect(pickVariant(["turbo"], "high", true)).toBeUndefined()
  })
})
