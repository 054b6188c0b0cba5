# kvfence container image (docs/deploy.md). Two stages: `build` compiles the native kernels and the TypeScript with
# the full toolchain; `runtime` holds only what `kvfence` runs: dist/src, production node_modules, the kernels.
# Runs as a non-root user and writes nothing outside /tmp and the mounted volumes, so a read-only root filesystem
# works: the incidents database goes where --incidents-db points (a volume), the generated default model (only
# when no --model is given) to $KVFENCE_CACHE_DIR. The model is mounted (a volume or an init container's emptyDir),
# never baked in or downloaded.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
# node-gyp's toolchain for the native kernels and better-sqlite3
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# npm ci: dependencies, the native kernels (the "install" script) and dist/ (the "prepare" script: tsc)
RUN npm ci --no-audit --no-fund
# the image must have its kernels: fail the build if they did not compile (npm ci only warns)
RUN npm run build:native
RUN npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    KVFENCE_CACHE_DIR=/tmp/kvfence/cache \
    XDG_STATE_HOME=/tmp/kvfence/state
WORKDIR /app
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY --from=build /src/build/Release/kvfence_native.node ./build/Release/kvfence_native.node
RUN chmod 0755 /app/dist/src/cli/main.js && ln -s /app/dist/src/cli/main.js /usr/local/bin/kvfence
# the node image's unprivileged user (uid 1000); Kubernetes manifests also set runAsNonRoot
USER 1000:1000
EXPOSE 8000 7101 7201 7202 9101
ENTRYPOINT ["kvfence"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
