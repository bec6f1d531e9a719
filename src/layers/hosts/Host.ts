/**
 * A registered host as the registry holds it in memory (layers/HostsFile.ts): its token's digest,
 * its command stream if it has one, its calls in flight (hosts/Calls.ts), and what its idle
 * expiry reads (since when it has had no stream, the sessions naming it).
 */
import type { Effect, Exit } from "effect"
import type { HostId, SessionId } from "../../domain/Ids.js"
import type { CallAnswer, EnvironmentCall, EnvironmentNotSent, EnvironmentUncertain } from "../../services/Environments.js"
import type { CallName } from "../../services/Hosts.js"
import type { Once } from "../Waits.js"
import type { CommandStreamBody, Queued } from "./CommandStream.js"

/** One command stream of a host, numbered in the order streams opened. */
export interface Connection {
  readonly id: number
  readonly body: CommandStreamBody
}

/** A call's answer: the host's, or not sent (its frame withdrawn from the backlog), or uncertain (its stream lost). */
export type CallExit = Exit.Exit<CallAnswer, EnvironmentNotSent | EnvironmentUncertain>

export interface InFlight {
  readonly connection: number
  readonly environment: string
  /** Its `call` frame in the stream's backlog: withdrawn, while it still waits there, when the call stops. */
  frame: Queued | undefined
  /** The call's answer once it has one (`answerCall`). */
  answered: CallExit | undefined
  /** The waiting caller's callback, while it waits. */
  resume: ((answer: CallExit) => void) | undefined
  /** Given when the host confirms a cancel (`{"stopped": true}`); made when the cancel is sent. */
  stopped: Once<void> | undefined
  cancelSent: boolean
  readonly emit: EnvironmentCall["emit"]
  /** Whether the call's outcome record became durable, once it is answered (a result's 204 waits for it). */
  readonly recorded: EnvironmentCall["recorded"]
  /**
   * Events and the result, one at a time; made by the call's first Event (most calls post none,
   * and a result for a call without one takes no lock: nothing can be in flight before it).
   */
  lock: Effect.Semaphore | undefined
}

export interface Host {
  readonly id: HostId
  readonly digest: Buffer
  connection: Connection | undefined
  readonly calls: Map<string, InFlight>
  /** Since when it has had no stream (meaningful while `connection` is undefined). */
  idleSinceMs: number
  /** Sessions recorded as naming it, not known to be deleted. */
  readonly sessions: Set<SessionId>
  /** False for a registration from a server that did not record sessions: it never expires by itself. */
  readonly sessionsRecorded: boolean
}

/** Answers a call in flight, once: its waiting caller now, or the caller that comes to wait. */
export const answerCall = (pending: InFlight, answer: CallExit) => {
  if (pending.answered !== undefined) return
  pending.answered = answer
  const resume = pending.resume
  pending.resume = undefined
  resume?.(answer)
}

/** A call's key among its host's calls in flight. */
export const keyOf = (call: CallName) => `${call.session}/${call.sequence}`

/** A host as messages name it. */
export const hostName = (host: string) => `host ${JSON.stringify(host)}`
