import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, TestClock } from "effect"
import { ItemMemory } from "../../src/services/ItemMemory.js"

const HOUR = 60 * 60 * 1000

const message = (id: string, text = "hi") => ({ type: "message", id, role: "assistant", content: [{ type: "output_text", text }] })
const call = (id: string) => ({ type: "function_call", id, call_id: `call_${id}`, name: "lookup", arguments: "{}" })

const withMemory = <A, E>(body: (memory: ItemMemory["Type"]) => Effect.Effect<A, E>) => Effect.flatMap(ItemMemory.make(), body)

describe("ItemMemory", () => {
  it.effect("remembers the items of an answer, finds them by id, and forgets them with their answer", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1"), call("fc_1")])
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        expect(yield* memory.lookup("team-a", "fc_1")).toEqual(Option.some(call("fc_1")))
        expect(yield* memory.lookup("team-a", "msg_unknown")).toEqual(Option.none())
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "fc_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
        yield* memory.forget("team-a", "resp_unknown")
        yield* memory.forget("team-b", "resp_2")
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
      })
    ))

  it.effect("keeps apps apart", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1", "for a")])
        yield* memory.remember("team-b", "resp_1", [message("msg_1", "for b")])
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1", "for a")))
        expect(yield* memory.lookup("team-b", "msg_1")).toEqual(Option.some(message("msg_1", "for b")))
        expect(yield* memory.lookup("team-c", "msg_1")).toEqual(Option.none())
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-b", "msg_1")).toEqual(Option.some(message("msg_1", "for b")))
      })
    ))

  it.effect("an item id reused by a later answer survives forgetting the earlier one", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_same", "old")])
        yield* memory.remember("team-a", "resp_2", [message("msg_same", "new")])
        expect(yield* memory.lookup("team-a", "msg_same")).toEqual(Option.some(message("msg_same", "new")))
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_same")).toEqual(Option.some(message("msg_same", "new")))
      })
    ))

  it.effect("keeps the last 1000 answers of an app", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        for (let i = 0; i < 1001; i++) yield* memory.remember("team-a", `resp_${i}`, [message(`msg_${i}`)])
        yield* memory.remember("team-b", "resp_b", [message("msg_b")])
        expect(yield* memory.lookup("team-a", "msg_0")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        expect(yield* memory.lookup("team-a", "msg_1000")).toEqual(Option.some(message("msg_1000")))
        expect(yield* memory.lookup("team-b", "msg_b")).toEqual(Option.some(message("msg_b")))
      })
    ))

  it.effect("keeps an answer one hour", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1")])
        yield* TestClock.adjust(HOUR / 2)
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        yield* TestClock.adjust(HOUR / 2 - 1)
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        yield* TestClock.adjust(1)
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
        yield* TestClock.adjust(HOUR / 2)
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.none())
        // remembering again starts a new hour
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
      })
    ))

  it.effect("is a layer", () =>
    Effect.gen(function* () {
      const memory = yield* ItemMemory
      yield* memory.remember("team-a", "resp_1", [message("msg_1")])
      expect(Option.isSome(yield* memory.lookup("team-a", "msg_1"))).toBe(true)
    }).pipe(Effect.provide(ItemMemory.layer())))
})
