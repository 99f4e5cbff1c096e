// A module resolve hook (registered by ./api-types.mjs): openapi-typescript's
// `import ts from 'typescript'` gets the TypeScript 5 installed as `typescript-5`.
export async function resolve(specifier, context, nextResolve) {
  if (specifier === 'typescript' && context.parentURL?.includes('/node_modules/openapi-typescript/')) {
    return nextResolve('typescript-5', context);
  }
  return nextResolve(specifier, context);
}
