// Cross-policy sampling lives in shared/ so the gateway draws its pools the same way.
export * from "../../shared/policy/pool.ts";
