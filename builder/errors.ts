// The builder's errors are the project's common ones (common/errors.ts, shared with bpa/).
export * from "../common/errors.js";
