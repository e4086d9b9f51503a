import { Chunk, Effect, Exit, Fiber, type Option } from "effect"
import { ModelEvent } from "../domain/Canonical.js"

/**
 * Spec rule 1.7 on a started stream: a run's pull that has produced nothing for `everyMs` yields a
 * KeepAlive event (each protocol's encoder writes its keep-alive: an SSE comment, a newline in the
 * Gemini JSON array) and goes on waiting for the same pull. The upstream may be silent, only
 * pinging, or sending a tool call that is passed on whole (spec 1.4): the client still gets bytes.
 *
 * The pending pull runs in a child fiber of the writer, kept across keep-alives (a keep-alive never
 * abandons or repeats a pull); the wait is a timer, not a second fiber.
 */
export const withKeepAlive = <E>(pull: Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<E>>, everyMs: number): Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<E>> => {
  const keepAlive = Chunk.of(ModelEvent.keepAlive)
  let pending: Fiber.RuntimeFiber<Chunk.Chunk<ModelEvent>, Option.Option<E>> | undefined
  const wait = (fiber: Fiber.RuntimeFiber<Chunk.Chunk<ModelEvent>, Option.Option<E>>) =>
    Effect.async<Chunk.Chunk<ModelEvent>, Option.Option<E>>((resume) => {
      const observer = (exit: Exit.Exit<Chunk.Chunk<ModelEvent>, Option.Option<E>>) => {
        clearTimeout(timer)
        pending = undefined
        resume(exit)
      }
      const timer = setTimeout(() => {
        fiber.removeObserver(observer)
        resume(Effect.succeed(keepAlive))
      }, everyMs)
      fiber.addObserver(observer)
      return Effect.sync(() => {
        clearTimeout(timer)
        fiber.removeObserver(observer)
      })
    })
  return Effect.suspend(() => (pending !== undefined ? wait(pending) : Effect.flatMap(Effect.fork(pull), (fiber) => wait((pending = fiber)))))
}
