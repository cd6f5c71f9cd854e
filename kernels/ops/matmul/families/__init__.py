"""The matmul kernel families the agents search (each renders a complete candidate module)."""

from kernels.ops.matmul.families.cuda_wmma import CudaWmmaMatmul
from kernels.ops.matmul.families.cutlass_sm90 import CutlassSm90Matmul
from kernels.ops.matmul.families.persistent_tma import PersistentTmaMatmul
from kernels.ops.matmul.families.splitk import SplitKMatmul
from kernels.ops.matmul.families.splitk_tma import SplitKTmaMatmul
from kernels.ops.matmul.families.streamk_tma import StreamKTmaMatmul
from kernels.ops.matmul.families.tiled import TiledMatmul
from kernels.ops.matmul.families.weight_stream import WeightStreamMatmul

FAMILIES = (
    TiledMatmul(),
    PersistentTmaMatmul(),
    SplitKMatmul(),
    SplitKTmaMatmul(),
    StreamKTmaMatmul(),
    CudaWmmaMatmul(),
    WeightStreamMatmul(),
    CutlassSm90Matmul(),
)
