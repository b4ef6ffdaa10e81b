# The decode workload of work.py made long: STEPS decode steps of LAYERS layers each (a bf16 GQA SDPA, a GEMM and
# two elementwise kernels per layer; NVTX `decode_step N bs=8` around the layers, `attention` around each SDPA),
# for a real .nsys-rep whose `nsys export` takes seconds (issue 14: a signal must land while nsys is exporting).
# python3 work_big.py [STEPS] [LAYERS]: about STEPS*LAYERS*4 kernels (big.sh: 7000*16, about 450k).
import sys

import torch
import torch.nn.functional as F

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 7000
LAYERS = int(sys.argv[2]) if len(sys.argv) > 2 else 16
torch.manual_seed(0)
dev = "cuda"
B, HQ, HKV, D, L = 8, 32, 4, 128, 256
q = torch.randn(B, HQ, 1, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, HKV, L, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(B, HKV, L, D, device=dev, dtype=torch.bfloat16)
w = torch.randn(HQ * D, HQ * D, device=dev, dtype=torch.bfloat16) * 0.01
torch.cuda.synchronize()
for step in range(STEPS):
    torch.cuda.nvtx.range_push(f"decode_step {step} bs={B}")
    for _layer in range(LAYERS):
        torch.cuda.nvtx.range_push("attention")
        o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.nvtx.range_pop()
        y = o.reshape(B, HQ * D) @ w
        q = (y.reshape(B, HQ, 1, D) * 0.5 + q).contiguous()
    torch.cuda.nvtx.range_pop()
    if step % 100 == 99:
        torch.cuda.synchronize()  # keep the launch queue short
torch.cuda.synchronize()
print("done", STEPS, LAYERS, float(q.float().abs().sum()))
