/**
 * The turn requests: `send`, `submit` and their keyed forms. Each is admitted as an operation in
 * flight (`admitted`) and weighed for its share of the working memory before its session is
 * opened; a keyed one's key is looked up first, since a replay never takes a turn's share. The
 * turn itself is started by TurnStarts.ts.
 */
import { Effect, Exit, HashMap } from "effect"
import type { Overloaded, SessionStorageError } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import { OPEN_HEAP_PER_BYTE, TURN_HEAP_PER_INPUT_BYTE } from "../../domain/Limits.js"
import type { TurnInput } from "../../domain/Messages.js"
import { liveRequest, pruneRequests, requestId } from "../../domain/Requests.js"
import type { Keyed, KeyedTurnError, Receipt, SessionsShape, TurnError, TurnOutcome, TurnRequest } from "../../services/Sessions.js"
import type { Cell } from "./Cell.js"
import { inputTooLarge, inputWeight } from "./InputBytes.js"
import { seenSend, seenSubmit } from "./Requests.js"
import { type Shared, stopping, type TurnHold } from "./Shared.js"
import type { TurnStarts } from "./TurnStarts.js"

export const makeTurnAdmission = (
  shared: Shared,
  { refusedStart, startTurn }: TurnStarts
): Pick<SessionsShape, "send" | "submit" | "sendKeyed" | "submitKeyed"> => {
  const { admitted, admittedUsing, config, deps, journal, projection, registry, using, workingMemory } = shared

  /** Ends a turn's wait for its share of the working memory once the drain has begun: it would start no turn. */
  const cutByDrain: Effect.Effect<never, Overloaded> = Effect.zipRight(admitted.closing, Effect.failSync(stopping))

  /** The time of a keyed access, its session's expired requests pruned when due (`pruneRequests`). */
  const keyedAccess = (cell: Cell): number => {
    const now = deps.clock.unsafeCurrentTimeMillis()
    cell.state = pruneRequests(cell.state, now, config.requestRetentionMs)
    return now
  }

  /**
   * A keyed send or submit. Its key is looked up before it is weighed as a turn, since a replay
   * never uses a turn's share of the working memory (a send's holds what reading its stored answer
   * back takes):
   * - its session's state in memory (its cell's, or the projection's cache) holds the key: the
   *   request is answered from it;
   * - nothing of the session is in memory: it is opened with its open's weight alone (Registry)
   *   and its key looked up there; a new key runs its turn on that open if the turn's share is
   *   free now (`holdingNow`: the open is not held while a share is waited for), else the session
   *   is let go and the request runs as a turn (`admitTurn`), waiting for its share holding nothing;
   * - otherwise (its key not held) it runs as a turn, which answers a key it finds too.
   * The lookup is in flight as the turn's request is (`admitTurn`), and starts no turn once the
   * drain has begun.
   */
  const keyedTurn = <A>(
    session: SessionId,
    mode: "send" | "submit",
    input: TurnInput,
    request: TurnRequest,
    answer: (cell: Cell, now: number) => Effect.Effect<Keyed<A> | undefined, SessionStorageError | Overloaded>,
    run: (cell: Cell, held: TurnHold) => Effect.Effect<Keyed<A>, KeyedTurnError>
  ): Effect.Effect<Keyed<A>, KeyedTurnError> =>
    Effect.suspend(() => {
      const asTurn = admitTurn(session, input, true, run)
      const known = registry.opened(session)?.state ?? projection.cached?.(session)
      if (known !== undefined) {
        if (!HashMap.has(known.requests, requestId(mode, request.key))) return asTurn
        return Effect.flatMap(using(session, (cell) => Effect.suspend(() => answer(cell, keyedAccess(cell)))), (replayed) => replayed === undefined ? asTurn : Effect.succeed(replayed))
      }
      const tooLarge = inputTooLarge(input, config.maxInputBytes)
      if (tooLarge !== undefined) return Effect.fail(tooLarge)
      const opened = admitted.admit(stopping, () =>
        using(session, (cell) =>
          Effect.flatMap(Effect.suspend(() => answer(cell, keyedAccess(cell))), (replayed) => {
            if (replayed !== undefined) return Effect.succeed(replayed)
            let kept = false
            return workingMemory.holdingNow(
              TURN_HEAP_PER_INPUT_BYTE * inputWeight(input) + cell.state.bytes,
              (held) => run(cell, { bytes: held.bytes, release: held.release, keep: () => void (kept = true) }),
              () => kept
            )
          })), { lookups: true })
      return Effect.flatMap(opened, (done) => done === undefined ? asTurn : Effect.succeed(done))
    })

  /** A keyed send's replay (`keyedTurn`), holding what reading its closing record takes. */
  const sendReplayOf = (cell: Cell, request: TurnRequest, now: number) =>
    Effect.suspend(() => {
      const e = liveRequest(cell.state, requestId("send", request.key), now, config.requestRetentionMs)
      if (e === undefined) return Effect.succeed(undefined)
      const reads = e.hash === request.hash && e.closed !== undefined && journal.readBytes !== undefined
        ? Effect.orElseSucceed(journal.readBytes(cell.session, e.closed - 1), () => 0)
        : Effect.succeed(0)
      return Effect.flatMap(reads, (bytes) =>
        workingMemory.holding(OPEN_HEAP_PER_BYTE * bytes, "this keyed send's stored answer", () => seenSend(journal, cell, request, now, config.requestRetentionMs)))
    })

  function* sendKeyedOf(cell: Cell, input: TurnInput, request: TurnRequest, held: TurnHold) {
    const now = keyedAccess(cell)
    const seen = yield* seenSend(journal, cell, request, now, config.requestRetentionMs)
    if (seen) return seen
    const turn = yield* startTurn(cell, input, "send", request, held)
    return { _tag: "Answered", value: yield* turn.done.await } satisfies Keyed<TurnOutcome>
  }

  function* submitKeyedOf(cell: Cell, input: TurnInput, request: TurnRequest, held: TurnHold) {
    const now = keyedAccess(cell)
    const seen = seenSubmit(cell, request, now, config.requestRetentionMs)
    if (seen) return seen
    const turn = yield* startTurn(cell, input, "submit", request, held)
    return { _tag: "Answered", value: { session_id: cell.session, sequence: turn.sequence } } satisfies Keyed<Receipt>
  }

  /**
   * Runs a turn's request holding its share of the working memory (BRAIN_WORKING_MEMORY_BYTES),
   * taken before its session is opened: TURN_HEAP_PER_INPUT_BYTE per byte of its input, and what
   * reaching the session's state takes (its state in memory, or its open: Registry.openWeight),
   * so a turn waiting for its share holds nothing of its session. Several large turns at once took
   * more heap than the process has; past the bound a turn waits in order, or is refused overloaded
   * with nothing written. A turn that starts keeps its share until it closes (its fiber gives it
   * back); an input above BRAIN_MAX_INPUT_BYTES, and a session in memory that cannot start a turn,
   * are refused first, without waiting; but not a keyed request's: its key may have been answered
   * (a retry), and its answer is what the retry gets whatever the session is doing now.
   *
   * The request is in flight (`admitted`) from here to its answer: a stop's drain waits for it.
   * Once the drain has begun no turn starts (`refusedStart`): a request still waiting for its share
   * then is refused at once, and one whose session is being opened once the open is over. A keyed
   * one is the exception to both: its share is waited for until its stop (past the drain
   * deadline), and one arriving after the drain began is still run, for its key's stored answer.
   */
  const admitTurn = <A, E>(
    session: SessionId,
    input: TurnInput,
    keyed: boolean,
    body: (cell: Cell, held: TurnHold) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | TurnError> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() =>
        admitNow(session, input, keyed, body, restore) ??
          restore(admitted.admit(
            stopping,
            (stop) =>
              weighTurn(session, input, keyed, keyed ? Effect.zipRight(stop.await, Effect.failSync(stopping)) : cutByDrain, (held) =>
                admittedUsing(session, (cell) => body(cell, held))),
            { lookups: keyed }
          ))
      )
    )

  /**
   * `admitTurn` when all it takes can be taken now, in one synchronous step: the drain has not
   * begun, the session's cell is open in memory (a session used within its grace or TTL), and the
   * turn's share of the working memory is free with nobody waiting before it. Then the operation
   * in flight, the share and the cell's use are taken here and given back by one finalizer, in
   * the order `admitTurn`'s own releases run (the cell, the share unless the turn kept it, the
   * operation), where `admitTurn` took and gave back each through an effect of its own (about 35
   * of Effect's instructions a turn). Undefined, having taken nothing, otherwise: `admitTurn`
   * then waits for what it must, and refuses what it must, as ever. Called uninterruptibly.
   */
  const admitNow = <A, E>(
    session: SessionId,
    input: TurnInput,
    keyed: boolean,
    body: (cell: Cell, held: TurnHold) => Effect.Effect<A, E>,
    restore: <X, Y, R>(effect: Effect.Effect<X, Y, R>) => Effect.Effect<X, Y, R>
  ): Effect.Effect<A, E | TurnError> | undefined => {
    if (admitted.closed || inputTooLarge(input, config.maxInputBytes) !== undefined) return undefined
    const opened = registry.opened(session)
    // A session that cannot start a turn is refused by `admitTurn` (a keyed request's key first looked up).
    if (opened === undefined || (!keyed && refusedStart(opened) !== undefined)) return undefined
    const held = workingMemory.holdNow(TURN_HEAP_PER_INPUT_BYTE * inputWeight(input) + opened.state.bytes)
    if (held === undefined) return undefined
    const cell = registry.takeOpened(session)
    if (cell === undefined) {
      held.release()
      return undefined
    }
    const operation = admitted.enter()!
    let kept = false
    const hold: TurnHold = { bytes: held.bytes, release: held.release, keep: () => void (kept = true) }
    const given = (exit: Exit.Exit<A, E>) =>
      Effect.sync(() => {
        if (!(Exit.isSuccess(exit) && kept)) held.release()
        admitted.leave(operation)
      })
    return Effect.flatMap(
      Effect.exit(restore(Effect.suspend(() => body(cell, hold)))),
      (exit) => Effect.zipRight(Effect.ensuring(registry.release(cell), given(exit)), exit)
    )
  }

  const weighTurn = <A, E>(
    session: SessionId,
    input: TurnInput,
    keyed: boolean,
    cutShort: Effect.Effect<never, Overloaded>,
    body: (held: TurnHold) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | TurnError> =>
    Effect.suspend((): Effect.Effect<A, E | TurnError> => {
      const tooLarge = inputTooLarge(input, config.maxInputBytes)
      if (tooLarge !== undefined) return Effect.fail(tooLarge)
      // A session in memory that cannot start a turn (busy, ended) says so now, not after a wait.
      const cell = keyed ? undefined : registry.opened(session)
      const refused = cell === undefined ? undefined : refusedStart(cell)
      if (refused !== undefined) return Effect.fail(refused)
      // Kept past the request only once a turn's fiber has taken it (a keyed replay starts none).
      let kept = false
      return Effect.flatMap(registry.openWeight(session), (reach) =>
        workingMemory.holding(
          TURN_HEAP_PER_INPUT_BYTE * inputWeight(input) + reach,
          "this turn",
          (held) => body({ bytes: held.bytes, release: held.release, keep: () => void (kept = true) }),
          () => kept,
          cutShort
        ))
    })

  return {
    send: (session, input) => admitTurn(session, input, false, (cell, held) => Effect.flatMap(startTurn(cell, input, "send", undefined, held), (turn) => turn.done.await)),
    submit: (session, input) =>
      admitTurn(session, input, false, (cell, held) => Effect.map(startTurn(cell, input, "submit", undefined, held), (turn) => ({ session_id: session, sequence: turn.sequence }))),
    sendKeyed: (session, input, request) =>
      keyedTurn(session, "send", input, request, (cell, now) => sendReplayOf(cell, request, now), (cell, held) => Effect.gen(() => sendKeyedOf(cell, input, request, held))),
    submitKeyed: (session, input, request) =>
      keyedTurn(
        session,
        "submit",
        input,
        request,
        (cell, now) => Effect.succeed(seenSubmit(cell, request, now, config.requestRetentionMs)),
        (cell, held) => Effect.gen(() => submitKeyedOf(cell, input, request, held))
      )
  }
}
