// Types for scripts/build-guests.js, which the guest tests import.
export declare const ROOT: string
export declare const ASC_FLAGS: ReadonlyArray<string>
export declare const admissionProblem: (bytes: Uint8Array, options?: { entry?: boolean }) => Promise<string | undefined>
export declare const compileGuest: (entry: string, outFile: string, options?: { checkEntry?: boolean }) => Promise<string>
export declare const shippedGuests: () => Array<[string, string]>
export declare const shippedUpToDate: () => boolean
export declare const buildShipped: (options?: { force?: boolean; log?: (line: string) => void }) => Promise<void>
export declare const mergeDataSegments: (bytes: Uint8Array) => Uint8Array
