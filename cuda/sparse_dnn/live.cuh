// The end of a layer for 4 images (a lane's float4 of the transposed batch), shared by the pull and
// cluster kernels: the challenge's activation min(ymax, max(0, z + bias)) where z != 0 (0 where
// z == 0), and the marking of images that are alive after the layer.
#pragma once

__device__ __forceinline__ float live_act(float z, float bias, float ymax)
{
    return (z != 0.f) ? fminf(fmaxf(z + bias, 0.f), ymax) : 0.f;
}

// Activates acc, stores it at out, and returns the nonzero mask (bit q: image q of the four).
__device__ __forceinline__ unsigned live_store4(float* out, float4 acc, float bias, float ymax)
{
    float4 v;
    v.x = live_act(acc.x, bias, ymax);
    v.y = live_act(acc.y, bias, ymax);
    v.z = live_act(acc.z, bias, ymax);
    v.w = live_act(acc.w, bias, ymax);
    *reinterpret_cast<float4*>(out) = v;
    return (v.x != 0.f) | (v.y != 0.f) << 1 | (v.z != 0.f) << 2 | (v.w != 0.f) << 3;
}

// Marks the images c0 .. c0 + 3 (< B) whose bit is set in nz; most are marked already, so the
// flags are read first and written only where they change.
__device__ __forceinline__ void live_mark4(int* alive, int c0, int B, unsigned nz)
{
    if (!nz) return;
    const int4 a = *reinterpret_cast<const int4*>(alive + c0);
    if ((nz & 1u) && !a.x && c0 + 0 < B) alive[c0 + 0] = 1;
    if ((nz & 2u) && !a.y && c0 + 1 < B) alive[c0 + 1] = 1;
    if ((nz & 4u) && !a.z && c0 + 2 < B) alive[c0 + 2] = 1;
    if ((nz & 8u) && !a.w && c0 + 3 < B) alive[c0 + 3] = 1;
}
