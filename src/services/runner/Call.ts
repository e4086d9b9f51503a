import type { Tracer } from "effect"
import type { CanonicalRequest, Usage } from "../../domain/Canonical.js"
import type { Reservation } from "../quota/Quota.js"
import type { RunOptions } from "./ModelRunner.js"
import type { AnswerSource, ProviderTarget } from "./ProviderClient.js"

/**
 * One model call's life as one state: a phase says what the call holds now, and so what settling
 * and releasing it must undo. A phase changes once per step of the call (never per event), by the
 * transitions below:
 *
 *   Resolving  → Admitted    a concurrency slot is taken
 *   Admitted   → Admitted    the quota's reservation joins it (when a limit applies)
 *   Admitted   → Attempting  an exchange with the plan's first target is open
 *   Attempting → Missed      the target failed before any output; its exchange is closed
 *   Missed     → Attempting  the next target is tried
 *   Attempting → Answering   the target answered
 *   any of those → Settled   the usage record is made, once
 *   any        → Released    the slot, the exchange and the answer in flight are let go (an
 *                            unsettled call is settled as cancelled first)
 */

/** Nothing held yet: the model is being resolved and a concurrency slot waited for. */
export interface Resolving {
  readonly _tag: "Resolving"
}

/** A concurrency slot is held; and, once the quota has admitted the call, its reservation. */
export interface Admitted {
  readonly _tag: "Admitted"
  /** what the call holds of its app's and key's limits (none where no limit applies) */
  readonly reservation: Reservation | undefined
}

/** An exchange with one target, open from the attempt that opened it until the call is released. */
export interface Exchange {
  readonly reservation: Reservation | undefined
  readonly target: ProviderTarget
  /** sampling params left out for the target */
  readonly dropped: ReadonlyArray<string>
  readonly source: AnswerSource
  /** the exchange's span, when tracing */
  readonly span: Tracer.Span | undefined
  /** when the attempt began (`performance.now()`) */
  readonly attemptT0: number
}

/** An exchange with `target` is open and nothing of its answer has been read yet. */
export interface Attempting extends Exchange {
  readonly _tag: "Attempting"
}

/**
 * The last target tried failed before any output and its exchange is closed: a failure of the call
 * now is counted against that target.
 */
export interface Missed {
  readonly _tag: "Missed"
  readonly reservation: Reservation | undefined
  readonly target: ProviderTarget
}

/** `target` answered: its exchange stays open, and in flight for its health, until the call is released. */
export interface Answering extends Exchange {
  readonly _tag: "Answering"
  readonly sessionId: string
  /** time to the first event, for a caller that streams */
  readonly ttftMs: number | undefined
  /**
   * the usage the answer has reported so far: the one field that moves within a phase, written as
   * events pass so that reading an event allocates nothing
   */
  usage: Usage | undefined
}

/** The usage record is made (it is made once); `held` is what the call holds until it is released. */
export interface Settled {
  readonly _tag: "Settled"
  readonly held: Live
}

/** Everything the call held is let go. */
export interface Released {
  readonly _tag: "Released"
}

/** A phase before the call is settled. */
export type Live = Resolving | Admitted | Attempting | Missed | Answering

export type Phase = Live | Settled | Released

/** One model call: what it was asked, when, and where it is in its life. */
export interface Call {
  readonly options: RunOptions
  /** the request as the caller sent it (before the app's policy joins its system prompt): what a conversation is recognised by */
  readonly opening: CanonicalRequest
  /** epoch ms, for the usage record */
  readonly at: number
  /** `performance.now()`, for latency and time to first event */
  readonly t0: number
  /** the one thing about the call that changes, only through `enter`, `settle` and `release` */
  state: Phase
}

export const resolving: Resolving = { _tag: "Resolving" }

export const released: Released = { _tag: "Released" }

// shared by every call that no quota applies to, so that taking a slot allocates nothing
const slotOnly: Admitted = { _tag: "Admitted", reservation: undefined }

export const make = (options: RunOptions, opening: CanonicalRequest): Call => ({
  options,
  opening,
  at: Date.now(),
  t0: performance.now(),
  state: resolving
})

/** Resolving → Admitted (a slot taken), and Admitted → Admitted (the quota's reservation joins it). */
export const admitted = (reservation: Reservation | undefined): Admitted =>
  reservation === undefined ? slotOnly : { _tag: "Admitted", reservation }

/** Admitted | Missed → Attempting: an exchange with the next target is open. */
export const attempting = (
  from: Admitted | Missed,
  target: ProviderTarget,
  dropped: ReadonlyArray<string>,
  source: AnswerSource,
  span: Tracer.Span | undefined,
  attemptT0: number
): Attempting => ({ _tag: "Attempting", reservation: from.reservation, target, dropped, source, span, attemptT0 })

/** Attempting → Missed: the target failed before any output (the runner closes its exchange). */
export const missed = (from: Attempting): Missed => ({ _tag: "Missed", reservation: from.reservation, target: from.target })

/** Attempting → Answering: the target's first events (or all of a whole answer) are in. */
export const answered = (from: Attempting, sessionId: string, ttftMs: number | undefined): Answering => ({
  _tag: "Answering",
  reservation: from.reservation,
  target: from.target,
  dropped: from.dropped,
  source: from.source,
  span: from.span,
  attemptT0: from.attemptT0,
  sessionId,
  ttftMs,
  usage: undefined
})

/**
 * Moves the call from `from` to `to`, and says whether it did: a call that has left `from`
 * meanwhile (released under a running attempt) stays where it is.
 */
export const enter = (call: Call, from: Phase, to: Phase): boolean => {
  if (call.state !== from) return false
  call.state = to
  return true
}

/** Live → Settled: the phase to record, or undefined when the call was recorded already. */
export const settle = (call: Call): Live | undefined => {
  const from = call.state
  if (from._tag === "Settled" || from._tag === "Released") return undefined
  call.state = { _tag: "Settled", held: from }
  return from
}

/** What the call holds in a phase (undefined once it is released). */
export const held = (phase: Phase): Live | undefined =>
  phase._tag === "Settled" ? phase.held : phase._tag === "Released" ? undefined : phase

/** Any phase → Released. */
export const release = (call: Call): void => {
  call.state = released
}

/** Every phase after Resolving holds a concurrency slot. */
export const holdsSlot = (phase: Live): boolean => phase._tag !== "Resolving"

/** The target a failure or an answer is counted against: the last one tried. */
export const targetOf = (phase: Live): ProviderTarget | undefined =>
  phase._tag === "Resolving" || phase._tag === "Admitted" ? undefined : phase.target

export const reservationOf = (phase: Live): Reservation | undefined => (phase._tag === "Resolving" ? undefined : phase.reservation)
