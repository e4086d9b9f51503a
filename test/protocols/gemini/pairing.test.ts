import { Either } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { pairCalls, type PairingContent } from "../../../src/protocols/gemini/Pairing.js"

const call = (name: string, id?: string) => ({ functionCall: id === undefined ? { name } : { name, id } })
const answer = (name: string, id?: string) => ({ functionResponse: id === undefined ? { name } : { name, id } })

describe("Gemini function-call pairing", () => {
  it("generates ids in order and pairs by name, earliest first", () => {
    const result = pairCalls([{ parts: [{}] }, { parts: [call("a"), call("b"), call("a")] }, { parts: [answer("a"), answer("b"), answer("a")] }])
    if (Either.isLeft(result)) throw new Error(result.left.message)
    expect([...result.right.calls.values()]).toEqual(["call_0", "call_1", "call_2"])
    expect([...result.right.responses.values()]).toEqual(["call_0", "call_1", "call_2"])
  })

  it("pairs by the id the client sends", () => {
    const result = pairCalls([{ parts: [call("a", "x1"), call("a", "x2")] }, { parts: [answer("a", "x2"), answer("a", "x1")] }])
    if (Either.isLeft(result)) throw new Error(result.left.message)
    expect(result.right.responses.get("1.0")).toBe("x2")
    expect(result.right.responses.get("1.1")).toBe("x1")
  })

  it("refuses a response answering nothing and a call nothing answers, naming the field", () => {
    expect(pairCalls([{ parts: [answer("a")] }])).toEqual(Either.left({ field: "contents.0.parts.0.functionResponse", message: expect.any(String) }))
    const unanswered = pairCalls([{ parts: [call("a")] }, { parts: [{}] }])
    expect(Either.isLeft(unanswered) && unanswered.left.field).toBe("contents.0.parts.0.functionCall")
  })

  it("pairs every response with a distinct earlier call of its name, for arbitrary interleavings", () => {
    // generate calls, then answer each one at some later point, in any order among same-named calls
    fc.assert(
      fc.property(fc.array(fc.constantFrom("a", "b", "c"), { minLength: 1, maxLength: 8 }), fc.array(fc.nat(), { maxLength: 8 }), (names, shuffle) => {
        const order = names.map((_, k) => k)
        for (let k = order.length - 1; k > 0; k--) {
          const r = (shuffle[k] ?? 0) % (k + 1)
          ;[order[k], order[r]] = [order[r], order[k]]
        }
        const contents: Array<PairingContent> = [{ parts: names.map((n) => call(n)) }, { parts: order.map((k) => answer(names[k])) }]
        const result = pairCalls(contents)
        if (Either.isLeft(result)) throw new Error(result.left.message)
        const answered = [...result.right.responses.values()]
        expect(new Set(answered).size).toBe(names.length)
        order.forEach((k, position) => {
          const id = result.right.responses.get(`1.${position}`)!
          const callIndex = Number(id.slice("call_".length))
          expect(names[callIndex]).toBe(names[k])
        })
      }),
      { numRuns: 500 }
    )
  })
})
