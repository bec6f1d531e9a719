/**
 * Creating a session: its request checked (the loop, its tools, Environments, model binding and
 * opening transcript) before anything is written, its journal made and its modules' and hosts'
 * uses recorded, then its creation recorded and its Environments set up, each step answered with
 * the create's own typed refusal. A create holds its share of the working memory from its checks
 * to its answer, and is in flight (`admitted`) for a stop's drain.
 *
 * A create whose own records (its configuration, its opening transcript, its Environments' setup
 * starts and the record closing its creation), weighed as the journal writes them (TurnWrites.ts
 * `weightOf`), would take its journal to BRAIN_MAX_SESSION_JOURNAL_BYTES is refused 413 before
 * anything is written: its every turn would be refused (StorageRoom.ts `journalFull`), so a 201
 * would name a session that can do nothing.
 */
import { Effect, Either } from "effect"
import { timerBoundsRefusal } from "../../domain/Configuration.js"
import { type DecodeIssue, decodeRefused } from "../../domain/DecodeRefusal.js"
import { admitEnvironments } from "../../domain/Environment.js"
import { CreationFailed, Internal, InvalidRequest, JournalWriteFailed, Overloaded, PayloadTooLarge } from "../../domain/Errors.js"
import { failure } from "../../domain/Failure.js"
import { mintSessionId } from "../../domain/Ids.js"
import { CREATE_HEAP_PER_BODY_BYTE } from "../../domain/Limits.js"
import { type RecordedBinding, toolNameRule, unrecordableField } from "../../domain/ModelBinding.js"
import { empty } from "../../domain/Projection.js"
import { checkPayload, entry, type Entry, payloadIssues } from "../../domain/Records.js"
import { noUnanswered } from "../../domain/TranscriptTail.js"
import type { AgentloopRejected, AgentloopStoreFailed } from "../../services/Agentloop.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { SessionsShape } from "../../services/Sessions.js"
import { Cell, commit } from "./Cell.js"
import { fromFence, setUpEnvironments } from "./EnvironmentLifecycle.js"
import { startedOf } from "./EnvironmentSteps.js"
import { jsonWeight } from "./InputBytes.js"
import { fromJournal } from "./FromJournal.js"
import { schemaRefusal } from "./ToolSchemas.js"
import { namedHosts, type Shared, stopping, summary } from "./Shared.js"
import { journalFull } from "./StorageRoom.js"
import { carriedBytes, noRoom, refusalText, transcriptRoom } from "./TranscriptRoom.js"
import { weigh, weightOf } from "./TurnWrites.js"

/** The create's field whose part of the configuration's JSON is the largest (its `model_binding` is its `model`). */
const largestField = (configuration: Record<string, unknown>): string => {
  let largest = "model"
  let most = -1
  for (const [field, value] of Object.entries(configuration)) {
    const bytes = value === undefined ? 0 : Buffer.byteLength(JSON.stringify(value), "utf8")
    if (bytes > most) {
      most = bytes
      largest = field === "model_binding" ? "model" : field
    }
  }
  return largest
}

/**
 * The refusal of a create whose records, `bytes` in the journal, would leave a journal at or past
 * BRAIN_MAX_SESSION_JOURNAL_BYTES (`journalFull`: no turn could start); undefined below it.
 * `largest` names what to make smaller (made only for a refusal).
 */
const creationPastBound = (config: ServerConfigShape, bytes: number, largest: () => string): PayloadTooLarge | undefined => {
  if (journalFull(config, bytes) === undefined) return undefined
  const limit = config.maxSessionJournalBytes
  return new PayloadTooLarge({
    message:
      `this session's creation would write ${bytes} bytes to its journal (its configuration, its opening transcript, its Environments' setup starts and the record closing its creation), at or past BRAIN_MAX_SESSION_JOURNAL_BYTES (${limit}): the session could start no turn, so nothing was created; make ${largest()} smaller`,
    details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit, journal_bytes: bytes }
  })
}

/** A create refused for the field at `path` (DESIGN §7: `details` lists each issue with its field's path). */
const refusedAt = (message: string, path: ReadonlyArray<string | number>) => new InvalidRequest({ message, details: [{ path, message }] })

export const makeCreate = (shared: Shared): SessionsShape["create"] => {
  const { admitted, agentloops, bindings, config, environmentBindings, hosts, journal, registry, room, steps, workingMemory, write } = shared

  /**
   * Runs a create holding its share of the working memory (BRAIN_WORKING_MEMORY_BYTES) from its
   * checks to its answer: CREATE_HEAP_PER_BODY_BYTE per byte of its request (its configuration and
   * opening transcript). Many creates of large opening transcripts at once took more heap than the
   * process has; past the bound a create waits in order, or is refused overloaded having checked
   * and written nothing.
   */
  const admitCreate = <A, E>(request: Parameters<SessionsShape["create"]>[0], create: Effect.Effect<A, E>): Effect.Effect<A, E | Overloaded> =>
    Effect.suspend(() => workingMemory.holding(CREATE_HEAP_PER_BODY_BYTE * jsonWeight(request), "this session's create", () => create))

  // In flight from here until it answers (`admitted`): a stop drains it, and past its drain deadline stops it.
  return (request, id) =>
    admitted.admit(stopping, (stop) => admitCreate(request, Effect.gen(function*() {
      // A body whose shape the checks below would stumble on (an application's, with no HTTP
      // schema before it): refused as its record's check would refuse it, naming the field.
      const misshapen = shapeRefusal(request)
      if (misshapen !== undefined) return yield* Effect.fail(misshapen)
      // What ends up in a timer, bounded here for every caller (an application's too, with no HTTP schema before it).
      const pastTimer = timerBoundsRefusal(request)
      if (pastTimer !== undefined) return yield* Effect.fail(refusedAt(pastTimer.message, pastTimer.path))
      const agentloop = request.agentloop ?? "official"
      const tools = request.tools ?? []
      // A loop or a Wasm tool that cannot run is refused now, not at the first turn.
      yield* agentloops.check(agentloop).pipe(Effect.mapError((e) => moduleRefused(e, ["agentloop"])))
      const modules = [...new Set(tools.flatMap((t) => (t.module !== undefined ? [t.module] : [])))]
      for (const module of modules) {
        yield* agentloops.tool(module).pipe(
          Effect.mapError((e) => moduleRefused(e, ["tools", tools.findIndex((t) => t.module === module), "module"]))
        )
      }
      // A model's call names a tool by its name alone: one name declared twice has no one meaning.
      const firstOf = new Map<string, number>()
      for (let i = 0; i < tools.length; i++) {
        const first = firstOf.get(tools[i]!.name)
        if (first !== undefined) {
          return yield* Effect.fail(
            refusedAt(`the tool name ${JSON.stringify(tools[i]!.name)} is declared twice (tools ${first} and ${i}): a model's call names one tool`, ["tools", i, "name"])
          )
        }
        firstOf.set(tools[i]!.name, i)
      }
      // Environments are admitted now: names, bindings and placements, before anything is written.
      const declared = request.environments ?? []
      const admitted = admitEnvironments(declared, tools, environmentBindings, (host) => hosts?.isRegistered(host) ?? false)
      if (Either.isLeft(admitted)) return yield* Effect.fail(new InvalidRequest({ message: admitted.left }))
      const environments = admitted.right
      // A host tool's schemas are Brain's to check (ToolSchemas.ts): one that could not check its calls is refused now.
      const hostEnvironments = new Set(environments.flatMap((e) => (e.driver === "host" ? [e.name] : [])))
      for (let i = 0; i < tools.length; i++) {
        const tool = tools[i]!
        if (tool.environment === undefined || !hostEnvironments.has(tool.environment)) continue
        for (const field of ["input_schema", "output_schema"] as const) {
          const why = schemaRefusal(tool[field], config.maxToolSchemaBytes)
          if (why !== undefined) return yield* Effect.fail(refusedAt(`tools[${i}].${field} ${why}`, ["tools", i, field]))
        }
      }
      // A binding name is resolved now and its non-secret fields recorded with the session.
      let modelBinding: RecordedBinding | undefined
      if (typeof request.model === "string") {
        const bound = bindings.get(request.model)
        if (!bound) {
          const known = bindings.names.length > 0 ? `the configured bindings are ${bindings.names.map((n) => JSON.stringify(n)).join(", ")}` : "no bindings are configured (BRAIN_MODELS)"
          return yield* Effect.fail(refusedAt(`no model binding named ${JSON.stringify(request.model)}; ${known}`, ["model"]))
        }
        modelBinding = { name: request.model, ...bound.binding }
        // A binding the session's record cannot hold is the server's configuration at fault: named
        // so, at the create's `model`, not with the record's whole schema.
        const unrecordable = unrecordableField(modelBinding)
        if (unrecordable !== undefined) {
          return yield* Effect.fail(refusedAt(
            `the model binding ${JSON.stringify(request.model)} cannot be recorded with a session: its ${unrecordable} is not in a form a session records (the server's BRAIN_MODELS must change)`,
            ["model"]
          ))
        }
        // A tool name the provider's API would refuse fails the create, not every model call.
        const rule = toolNameRule(bound.binding)
        const misnamed = rule === undefined ? -1 : tools.findIndex((t) => !rule.pattern.test(t.name))
        if (rule !== undefined && misnamed >= 0) {
          return yield* Effect.fail(
            refusedAt(
              `the tool name ${JSON.stringify(tools[misnamed]!.name)} is not one ${bound.binding.provider} takes (${rule.says}), as binding ${JSON.stringify(request.model)} would send it`,
              ["tools", misnamed, "name"]
            )
          )
        }
      }
      // The opening transcript is recorded once, as the session's first transcript_delta (a
      // record carries references, not copies): not in the configuration every activation gets.
      const { environments: _declared, transcript: _opening, ...rest } = request
      const configuration = {
        ...rest,
        agentloop,
        ...(modelBinding ? { model_binding: modelBinding } : {}),
        ...(environments.length > 0 ? { environments } : {})
      }
      // Refuse bad input before anything exists on disk.
      // Refused, it is named as HTTP's 400 names it: each field where the create has it
      // (`model.provider`, `transcript[0].content`), not the record's schema.
      if (checkPayload("session_creation_started", { configuration }) !== undefined) {
        return yield* Effect.fail(createRefused("session_creation_started", { configuration }))
      }
      if (request.transcript?.length && checkPayload("transcript_delta", { keep: 0, append: request.transcript }) !== undefined) {
        return yield* Effect.fail(createRefused("transcript_delta", { keep: 0, append: request.transcript }))
      }
      // A configuration, or an opening transcript, the loop's input could not carry would fail
      // every turn (or every save): refused now.
      // (A loop that cannot be loaded now, its store out of descriptors, is no fault of the request.)
      const loop = yield* agentloops.resolve(agentloop).pipe(Effect.mapError((e) =>
        e.failure.retryable ? new Overloaded({ message: `the agentloop cannot be loaded now: ${e.failure.message}` }) : refusedAt(e.failure.message, ["agentloop"])
      ))
      const roomLeft = transcriptRoom(config, loop.input, () => JSON.stringify(configuration))
      if (roomLeft !== undefined) {
        const none = noRoom(roomLeft)
        if (none?.blames === "configuration") return yield* Effect.fail(refusedAt(none.text, [largestField(configuration)]))
        if (request.transcript !== undefined && request.transcript.length > 0) {
          const bytes = carriedBytes(roomLeft, [], noUnanswered, request.transcript, 0)
          if (bytes > roomLeft.bytes) return yield* Effect.fail(refusedAt(refusalText(roomLeft, bytes, "the opening transcript"), ["transcript"]))
        }
      }
      // The creation's first records, made once. Under BRAIN_MAX_SESSION_JOURNAL_BYTES they are
      // weighed as the journal will write them (their JSON made here is the one written), with the
      // record starting each Environment's setup (it carries the Environment's options again) and
      // the record that closes the creation (its payload names the first record, sequence 1): a
      // journal they would take to the bound starts no turn, so the create is refused before
      // anything exists. Only the Environments' answers to their setups, not known yet, are not weighed.
      const appended = request.transcript !== undefined && request.transcript.length > 0 ? { keep: 0, append: request.transcript } : undefined
      let opening: ReadonlyArray<Entry>
      if (config.maxSessionJournalBytes > 0) {
        const started = weigh("session_creation_started", { configuration })
        const delta = appended === undefined ? undefined : weigh("transcript_delta", appended)
        opening = delta === undefined ? [started.entry] : [started.entry, delta.entry]
        const bytes = environments.reduce(
          (sum, e) => sum + weightOf(startedOf("setup", e)),
          started.bytes + (delta?.bytes ?? 0) + weightOf(entry("session_creation_ended", { sequence: 1 }))
        )
        const largest = () =>
          (delta?.bytes ?? 0) > started.bytes
            ? "the opening transcript"
            : `the configuration (its largest field is ${JSON.stringify(largestField(configuration))})`
        const past = creationPastBound(config, bytes, largest)
        if (past !== undefined) return yield* Effect.fail(past)
      } else {
        opening = appended === undefined
          ? [entry("session_creation_started", { configuration })]
          : [entry("session_creation_started", { configuration }), entry("transcript_delta", appended)]
      }
      // Below BRAIN_MIN_FREE_DISK_BYTES: refused before anything exists (StorageRoom.ts).
      yield* room.forCreate
      // Stopped before anything exists: refused as a request that arrived after the drain began.
      if (stop.isDone) return yield* Effect.fail(stopping())
      const session = id ?? (yield* mintSessionId)
      yield* journal.create(session).pipe(Effect.mapError((e) => fromJournal(e, { ambiguous: false })))
      // The modules' uses are recorded before the session names them, so none is removed under
      // it (one removed since its check above is refused here as it would have been there); so
      // are its hosts', so that no registration expires under it (HostsFile.ts).
      const uses = [agentloop, ...modules]
      const named = namedHosts(environments)
      const unuse = Effect.zipRight(
        Effect.forEach(uses, (id) => agentloops.unuse(id, session), { discard: true }),
        Effect.forEach(named, (host) => hosts?.release(host, session) ?? Effect.void, { discard: true })
      )
      const fieldOf = (id: string) => (id === agentloop ? ["agentloop"] : ["tools", tools.findIndex((t) => t.module === id), "module"])
      yield* Effect.zipRight(
        Effect.forEach(uses, (id) =>
          agentloops.use(id, session).pipe(
            Effect.mapError((e) => moduleRefused(e, fieldOf(id)))
          ), { discard: true }),
        Effect.forEach(named, (host) => hosts?.use(host, session) ?? Effect.void, { discard: true })
      ).pipe(Effect.tapError(() => Effect.zipRight(Effect.ignore(journal.remove(session)), unuse)))
      const cell = new Cell(session, empty)
      // The creation is live work of this process: registered before its first record, so that
      // an access meanwhile sees it `creating` and never recovers it (Registry.creating), and
      // uninterruptible from here, so that it always ends with `adopt` or `abandon`.
      yield* registry.creating(cell)
      return yield* Effect.uninterruptible(Effect.gen(function*() {
        const [first] = yield* commit(journal, cell, opening).pipe(
          // Nothing was recorded: no session is left behind (Registry.abandon), and the caller is
          // told so; if its journal could not be removed, the refusal stays ambiguous.
          Effect.catchAll((e) =>
            Effect.flatMap(Effect.zipLeft(registry.abandon(cell), unuse), (removed) =>
              Effect.fail(
                removed && e._tag === "JournalWriteFailed"
                  ? new JournalWriteFailed({ message: `${e.message}; the session's creation was not recorded, and nothing was created` })
                  : fromJournal(e)
              ))
          )
        )
        // The creation is left open when a write fails: the next access (by whoever learns the id) records it failed.
        const setup = yield* setUpEnvironments(steps, cell, environments, stop).pipe(
          Effect.mapError(fromFence),
          Effect.tapError(() => registry.abandon(cell))
        )
        if (setup !== undefined) {
          const { environment, failure: why, stopped } = setup
          // Interrupted by a stop, the creation is recorded failed as the restart's recovery would
          // record it: ambiguous when the setup it stopped was sent (its answer may have come).
          const message = stopped
            ? `the server is stopping: the creation was interrupted before Environment ${JSON.stringify(environment)} was set up`
            : `Environment ${JSON.stringify(environment)} could not be set up: ${why.message}`
          const code = stopped ? "interrupted" : "creation_failed"
          yield* write(cell, [
            entry("session_creation_failed", { sequence: first!, failure: failure(code, message, { ambiguous: stopped && why.ambiguous, details: { environment, failure: why } }) })
          ]).pipe(Effect.tapError(() => registry.abandon(cell)))
          yield* registry.adopt(cell)
          return yield* Effect.fail(
            new CreationFailed({
              message: `${message}; the session ${session} has failed and can be deleted`,
              details: { session_id: session, environment, failure: why }
            })
          )
        }
        yield* write(cell, [entry("session_creation_ended", { sequence: first! })]).pipe(
          Effect.tapError(() => registry.abandon(cell))
        )
        // The answer is the creation's: taken before another request can use the session.
        const created = summary(cell)
        yield* registry.adopt(cell)
        return created
      }))
    })))
}

/**
 * The refusal of a create whose first records' check refused them (an application's create, which
 * no HTTP decoder checked first): each issue named at the create's own field — the configuration's
 * fields are the create's, its `model_binding` its `model`, the opening transcript's `append` its
 * `transcript` — by the HTTP decoders' refusal (domain/DecodeRefusal.ts).
 */
const createRefused = (kind: "session_creation_started" | "transcript_delta", payload: unknown): InvalidRequest => {
  const atCreate = (path: ReadonlyArray<PropertyKey>): ReadonlyArray<PropertyKey> => {
    if (kind === "transcript_delta") return path[0] === "append" ? ["transcript", ...path.slice(1)] : path
    const [first, field, ...rest] = path
    if (first !== "configuration" || field === undefined) return path
    return [field === "model_binding" ? "model" : field, ...rest]
  }
  return decodeRefused(payloadIssues(kind, payload).map((issue) => ({ ...issue, path: atCreate(issue.path) })))
}

const isObject = (u: unknown): u is object => typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * The refusal of a create body the checks before its record's would stumble on: not an object, or
 * `tools` not an array of objects (the HTTP schema refuses both first). Undefined for any other;
 * a few property reads for a body HTTP decoded.
 */
const shapeRefusal = (request: unknown): InvalidRequest | undefined => {
  if (!isObject(request)) {
    return decodeRefused([{ _tag: "Type", path: [], message: `Expected a create's body (an object), actual ${request === null ? "null" : Array.isArray(request) ? "an array" : typeof request}` }])
  }
  const tools = (request as { readonly tools?: unknown }).tools
  if (tools === undefined || (Array.isArray(tools) && tools.every(isObject))) return undefined
  const refused = createRefused("session_creation_started", { configuration: { agentloop: "official", ...request } })
  const about = (refused.details as ReadonlyArray<DecodeIssue>).filter((d) => d.path[0] === "tools")
  return about.length > 0 ? decodeRefused(about) : refused
}

/**
 * A loop or tool module a create names, refused: a module that cannot run is the request's fault
 * (400 at its field); one that cannot be compiled now (the compile thread failed) is the server's
 * passing fault (503 `overloaded`); a store that cannot answer as `moduleStoreFailed` says.
 */
const moduleRefused = (e: AgentloopRejected | AgentloopStoreFailed, path: ReadonlyArray<string | number>): InvalidRequest | Overloaded | Internal =>
  e._tag === "AgentloopStoreFailed"
    ? moduleStoreFailed(e)
    : e.overloaded === true
    ? new Overloaded({ message: `${e.reason}; try again shortly` })
    : refusedAt(e.reason, path)

/**
 * The module store could not answer (a module that exists but cannot be read now is never "no such
 * module", which would refuse the create 400): 503 `overloaded` out of descriptors, else a 500.
 */
const moduleStoreFailed = (e: AgentloopStoreFailed): Overloaded | Internal =>
  e.exhausted === true
    ? new Overloaded({ message: `the module store cannot be read now: ${e.reason}; try again shortly` })
    : new Internal({ message: `the module store failed: ${e.reason}` })
