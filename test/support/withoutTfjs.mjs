// `node --import ./test/support/withoutTfjs.mjs ...`: module resolution as in the functions image,
// which leaves TF.js out (functions/Dockerfile): importing @tensorflow/* or core-js fails as it
// would there, so a host test can show that a functions-image role starts without them.
import { register } from "node:module";

const hook = `export async function resolve(specifier, context, next) {
  if (/^(@tensorflow|core-js)(\\/|$)/.test(specifier)) {
    const error = new Error("Cannot find package '" + specifier + "' (the functions image leaves TF.js out)");
    error.code = "ERR_MODULE_NOT_FOUND";
    throw error;
  }
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hook)}`);
