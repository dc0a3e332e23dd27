// Tile shapes shared by the project's kernels.
#pragma once

#ifndef TILE
#define TILE 32
#endif

__device__ inline int tile_index(int row, int column) { return row * TILE + column; }
