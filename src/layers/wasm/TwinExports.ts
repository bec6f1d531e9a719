/**
 * What an instrumented twin exports for its host besides the guest's own exports (Instrument.ts
 * makes it, Inline.ts drives it); apart from Instrument.ts so the main thread need not load Binaryen.
 *
 * One export drives Asyncify, `(op, ptr)`: `op` is one of ASYNCIFY_OPS, and `ptr` the suspension
 * buffer for the two starts. Asyncify's own five exports are dropped: V8 made an instance of the
 * official loop with them in 19–20 µs, with this one in 6 µs (the plain module: 4 µs). The host
 * keeps Asyncify's state itself, since it set it.
 */
import * as crypto from "node:crypto"
export const ASYNCIFY_EXPORT = "brain$asyncify"
export const ASYNCIFY_OPS = { startUnwind: 0, stopUnwind: 1, startRewind: 2, stopRewind: 3 } as const

/** Bytes of guest memory taken (from `brain_alloc`, at the first host call) for a suspended stack, on the main thread and on a worker alike. */
export const SUSPEND_BYTES = 8 * 1024

/**
 * A resettable twin's two exports (Instrument.ts): `save` copies every mutable global into a shadow
 * of its own, `restore` copies them back. A twin without them is never reset.
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
export const TWIN_FORMAT = 8

/** The file name of `hash`'s twin, made by the build or kept by a server. */
export const prebuiltTwinName = (hash: string) => `${hash}.v${TWIN_FORMAT}.wasm`

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
