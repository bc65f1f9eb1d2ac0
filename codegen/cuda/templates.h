/*
 * templates.h -- the templates folder (one .cuh per kernel kind), embedded into the library at build time
 * (cmake/kf_embed.cmake writes them as NUL-terminated char arrays), so the
 * library needs no template files at run time and a kernel's source is a
 * pure function of the library build and the plan.
 */
#ifndef KF_CODEGEN_CUDA_TEMPLATES_H
#define KF_CODEGEN_CUDA_TEMPLATES_H

extern const char kf_cuda_tpl_common[];
extern const char kf_cuda_tpl_elementwise[];
extern const char kf_cuda_tpl_rowwise[];
extern const char kf_cuda_tpl_colreduce[];
extern const char kf_cuda_tpl_argmax[];
extern const char kf_cuda_tpl_hopper[];
extern const char kf_cuda_tpl_gemm_common[];
extern const char kf_cuda_tpl_gemm_sm90[];
extern const char kf_cuda_tpl_gemm_sm80[];
extern const char kf_cuda_tpl_gemm_fold[];
extern const char kf_cuda_tpl_gemm_prepass[];
extern const char kf_cuda_tpl_gemm_simt[];
extern const char kf_cuda_tpl_gemm_decode[];
extern const char kf_cuda_tpl_attention_sm90[];
extern const char kf_cuda_tpl_attention[];
extern const char kf_cuda_tpl_attention_common[];
extern const char kf_cuda_tpl_attention_decode[];
extern const char kf_cuda_tpl_attention_simt[];

#endif /* KF_CODEGEN_CUDA_TEMPLATES_H */
