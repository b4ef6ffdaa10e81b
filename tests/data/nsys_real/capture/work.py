# A tiny decode-attention-like CUDA workload with NVTX ranges (torch only), for a small real .nsys-rep.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
dev = "cuda"
B, HQ, HKV, D, L = 8, 32, 4, 128, 2048
q = torch.randn(B, HQ, 1, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, HKV, L, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(B, HKV, L, D, device=dev, dtype=torch.bfloat16)
w = torch.randn(HQ * D, HQ * D, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
for step in range(6):
    torch.cuda.nvtx.range_push(f"decode_step {step} bs={B}")
    torch.cuda.nvtx.range_push("attention")
    o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.nvtx.range_pop()
    y = o.reshape(B, HQ * D) @ w
    q = (y.reshape(B, HQ, 1, D) * 0.01).contiguous()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done", float(q.float().abs().sum()))
