/**
 * What an instrumented twin exports for its host besides the guest's own exports (Instrument.ts
 * makes it, Inline.ts drives it); apart from Instrument.ts so the main thread need not load Binaryen.
 *
 * A host call crosses between JavaScript and the twin as few times as it can: the twin drives
 * Asyncify itself (Instrument.ts, `addSteps`). The host enters the guest through a step export of
 * each entry (STEP_EXPORTS); the guest's `brain.call` is the twin's own function, which calls the
 * host's. To suspend the guest, the host writes the suspension buffer's header and answers its call
 * with the pair (buffer, UNWIND_LEN): the twin starts the unwind, and the step stops it when the
 * entry has returned. To resume it, the host writes the answer into memory the guest allocates and
 * calls the step again with the answer's pair and the buffer: the twin starts the rewind, and its
 * `brain.call` stops it and answers that pair. A text turn of the official loop crossed twelve
 * times with Asyncify's four operations as exports of their own (twin format 8), seven now.
 * Asyncify's own exports are dropped: V8 made an instance of the official loop with its five in
 * 19–20 µs, with one export in 6 µs (the plain module: 4 µs). The host keeps Asyncify's state
 * itself, since it set it.
 */
import * as crypto from "node:crypto"

/**
 * Each entry's step, `(ptr, len, answerPtr, answerLen, buffer) -> i64`: `buffer` ENTER enters the
 * entry with its input's (ptr, len); else the guest is rewound from the suspension buffer at
 * `buffer`, and the host call it unwound from answers the pair (answerPtr, answerLen). Either way it
 * returns what the entry returned, the unwind stopped when it returned unwinding.
 */
export const STEP_EXPORTS = { brain_run: "brain$run", brain_tool: "brain$tool" } as const

/** A step's `buffer` that enters the entry: no suspension buffer is there (8 KiB from 2^32 − 1 would run past any memory). */
export const ENTER = -1

/** A host call's answer whose length is this (a pair no answer is: an answer is far shorter) makes the twin unwind into the buffer at its pointer. */
export const UNWIND_LEN = 0xffffffff

/** The twin's global holding the answer the step was given, for the rewound `brain.call` to return. */
export const ANSWER_GLOBAL = "brain$answer"

/** Bytes of guest memory taken (from `brain_alloc`, at the first host call) for a suspended stack, on the main thread and on a worker alike. */
export const SUSPEND_BYTES = 8 * 1024

/**
 * A resettable twin's two exports (Instrument.ts): `save` copies every mutable global into a shadow
 * of its own, `restore` copies them back and answers the written marks as they were before,
 * `(WRITTEN_EXPORT << 32) | LOW_EXPORT` (0 without them). A twin without them is never reset.
 */
export const RESET_EXPORTS = { save: "brain$save", restore: "brain$restore" } as const

/**
 * A twin's exported global (an i32) holding one past the highest byte of memory its code stored
 * to, when every store it can make is counted (Instrument.ts, "Written"): what the host must zero
 * at most when it puts the instance back. A twin without it may have written anywhere.
 */
export const WRITTEN_EXPORT = "brain$written"

/**
 * A twin's exported global (an i32) beside WRITTEN_EXPORT, holding the lowest byte of memory its
 * code stored to (2^32 − 1 when it stored none): the host sets it so after instantiation, and a
 * reset restores it so, so that it tells whether an activation wrote below the end of the module's
 * image (what instantiation left in the memory), which the host then copies back. A twin without it
 * may have written anywhere.
 */
export const LOW_EXPORT = "brain$low"

/**
 * The host's namespace: every name the instrumentation adds to a twin (its exports above, its
 * fuel global and refill import) starts with it. Admission refuses a module exporting such a name
 * (Module.ts), and Instrument.ts drops every export of a guest's but its entries before adding its
 * own, so a twin's exports in it are the instrumentation's only: the host reads them as such.
 */
export const HOST_NAME_PREFIX = "brain$"

/**
 * The version of what Instrument.ts makes of a module: a twin made ahead of time (by the build,
 * `dist/loops/twins/<sha256>.v<TWIN_FORMAT>.wasm`) is used only when it names this version. Raise
 * it with any change to the instrumentation.
 */
export const TWIN_FORMAT = 9

/** The file name of `hash`'s twin, made by the build or kept by a server. */
export const prebuiltTwinName = (hash: string) => `${hash}.v${TWIN_FORMAT}.wasm`

/**
 * The file name that says `hash`'s module got no twin because making it took the instrumenting
 * thread past its deadline (InlineModules.ts): an empty file beside the kept twins, so a restart
 * does not spend the deadline on it again. Named by the twin format, a new instrumentation tries
 * again; one lost or removed costs one more deadline, one forged a twin, never what a guest computes.
 */
export const overdueMarkerName = (hash: string) => `${hash}.v${TWIN_FORMAT}.overdue`

const DIGEST_BYTES = 32

/**
 * A twin's file, the build's and a server's alike: the twin's SHA-256, then the twin. A twin runs
 * on the main thread trusted to meter itself, so one that does not match its digest (a torn write,
 * a flipped bit) is never used.
 */
export const twinFile = (twin: Uint8Array): Buffer => Buffer.concat([crypto.createHash("sha256").update(twin).digest(), twin])

/** The twin a file holds, or undefined when the file does not match its digest. */
export const twinInFile = (file: Buffer): Buffer | undefined => {
  if (file.length <= DIGEST_BYTES) return undefined
  const twin = file.subarray(DIGEST_BYTES)
  return crypto.createHash("sha256").update(twin).digest().equals(file.subarray(0, DIGEST_BYTES)) ? twin : undefined
}
