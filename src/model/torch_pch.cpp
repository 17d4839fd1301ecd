// Compiles the shared LibTorch precompiled header once.
